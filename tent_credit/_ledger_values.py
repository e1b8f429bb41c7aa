"""The sender ledger's values: dispositions, token states, the blocked outcome, snapshots.

Split from :mod:`._ledger` (which re-exports every name here) so that module holds the ledger
itself: these are the immutable values it answers with and the token lifecycle table.
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Mapping

import attrs

from ._types import CreditKey, CreditResource, _IdentityEnum
from .errors import InvalidArgument

__all__ = [
    "TOKEN_TRANSITIONS",
    "Blocked",
    "LedgerEntrySnapshot",
    "LedgerStatistics",
    "TokenState",
    "UpdateDisposition",
]


class UpdateDisposition(_IdentityEnum):
    """What :meth:`SenderCreditLedger.apply_update` did with a well-formed update (a value)."""

    APPLIED = "applied"
    """The update was newer and its totals were recorded."""
    DUPLICATE_OR_OLD = "duplicate_or_old"
    """``sequence <= last``: a duplicate or reordered old update; nothing changed."""
    SEQUENCE_GAP = "sequence_gap"
    """Applied, but it skipped sequence numbers after the first update (some were lost)."""


class TokenState(_IdentityEnum):
    """Lifecycle of a :class:`ReservationToken` (docs/semantics.md#sender-ledger "Reservations are
    tokens")."""

    EMPTY = "empty"
    RESERVED = "reserved"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"


TOKEN_TRANSITIONS: Mapping[tuple[TokenState, str], TokenState] = types.MappingProxyType(
    {
        (TokenState.EMPTY, "reserve"): TokenState.RESERVED,
        (TokenState.RESERVED, "commit"): TokenState.COMMITTED,
        (TokenState.RESERVED, "rollback"): TokenState.ROLLED_BACK,
    }
)
"""The token lifecycle, the only place it is written. A missing key is misuse (InvalidEntry)."""


def _check_key(key: object) -> None:
    if type(key) is not CreditKey:
        raise InvalidArgument(f"expected a CreditKey, got {type(key).__name__}")


def _resource_tuple(_inst: object, attr: attrs.Attribute[object], value: object) -> None:
    if not isinstance(value, tuple) or not value:
        raise InvalidArgument(f"{attr.name} must be a non-empty tuple of CreditResource")
    # loops, not all()/any() over generators: a blocked reservation builds one of these
    for r in value:
        if not isinstance(r, CreditResource):
            raise InvalidArgument(f"{attr.name} must hold CreditResource members only")
    for a, b in itertools.pairwise(value):
        if a >= b:
            raise InvalidArgument(f"{attr.name} must be unique and sorted by resource")


@attrs.frozen(kw_only=True)
class Blocked:
    """``try_reserve``'s "insufficient credit" outcome: every resource that lacked credit.

    ``exhausted`` is non-empty, unique and sorted by resource. Nothing was reserved.

    Not to be confused with ``tent_sched.Blocked``, an admission queue's eligibility verdict
    ("hold this owner back"); a :class:`~tent_credit.DispatchGate` turns this value into that
    verdict (as a ``GateBlocked`` carrying a ``BackpressureInfo``).
    """

    key: CreditKey = attrs.field()
    exhausted: tuple[CreditResource, ...] = attrs.field(validator=_resource_tuple)

    @key.validator
    def _validate_key(self, _attr: attrs.Attribute[CreditKey], value: object) -> None:
        _check_key(value)


@attrs.frozen(kw_only=True)
class LedgerEntrySnapshot:
    """A copy of one ledger entry; every mapping names all four resources."""

    key: CreditKey
    epoch: int
    last_sequence: int
    has_update: bool
    grant_total: Mapping[CreditResource, int]
    consumed: Mapping[CreditResource, int]
    returned: Mapping[CreditResource, int]
    available: Mapping[CreditResource, int]


@attrs.frozen(kw_only=True)
class LedgerStatistics:
    """Counters since construction plus per-resource totals summed over the live entries.

    ``updates_applied`` counts every update whose totals were recorded (including the
    ``sequence_gaps`` among them); ``updates_rejected`` counts ``apply_update`` calls that raised;
    ``epoch_resets`` counts activations that replaced an entry at a higher epoch;
    ``fenced_tokens`` counts commit/rollback attempts on a token whose entry was fenced.
    """

    entries: int
    updates_applied: int
    duplicates_or_old: int
    sequence_gaps: int
    updates_rejected: int
    epoch_resets: int
    reservations: int
    commits: int
    rollbacks: int
    blocked: int
    returns: int
    fenced_tokens: int
    granted: Mapping[CreditResource, int]
    consumed: Mapping[CreditResource, int]
    returned: Mapping[CreditResource, int]
    available: Mapping[CreditResource, int]
