"""The sender credit ledger: cumulative grants, atomic reservations and epoch fencing.

docs/semantics.md#sender-ledger. One entry per :class:`CreditKey` holds the key's epoch, the last
accepted update sequence and, per resource, the cumulative ``grant_total`` advertised by the
receiver and the sender's own ``consumed`` and ``returned`` totals::

    available[r] = grant_total[r] - consumed[r] - returned[r]

The ledger keeps the invariant ``consumed[r] + returned[r] <= grant_total[r] <= 2**64 - 1`` for
every entry and resource: every call that could break it is rejected before anything changes.
The only call that raises ``available`` is :meth:`SenderCreditLedger.apply_update`; completion
of dispatched work never mints local credit (RFC "Concurrency rules" 6).

Reservations are :class:`ReservationToken` handles whose lifecycle is the table
:data:`TOKEN_TRANSITIONS` (EMPTY → RESERVED → COMMITTED | ROLLED_BACK, each step once). A token
belongs to the entry that issued it: once that entry is fenced (deactivated, or replaced by an
activation at a higher epoch) every operation on the token raises :class:`InvalidEntry` and
touches nothing, so old work can never change a new epoch's accounting.

The ledger is sans-IO and not thread-safe: one owner (the dispatch loop) drives it serially
(RFC "Concurrency rules" 2).
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence

from ._arith import check_u64, checked_add, checked_sub
from ._describe import describe
from ._ledger_values import (
    TOKEN_TRANSITIONS,
    Blocked,
    LedgerEntrySnapshot,
    LedgerStatistics,
    TokenState,
    UpdateDisposition,
    _check_key,
)
from ._messages import MAX_RESOURCES_PER_MESSAGE, SCHEMA_VERSION, ReceiverCreditUpdate
from ._types import CreditAmount, CreditCharge, CreditKey, CreditResource
from .errors import (
    CreditError,
    GrantDecreased,
    InsufficientCredit,
    InvalidArgument,
    InvalidEntry,
    TooManyRequests,
)

__all__ = [
    "TOKEN_TRANSITIONS",
    "Blocked",
    "LedgerEntrySnapshot",
    "LedgerStatistics",
    "ReservationToken",
    "SenderCreditLedger",
    "TokenState",
    "UpdateDisposition",
    "update_acceptance",
]

_RESOURCES: tuple[CreditResource, ...] = tuple(CreditResource)
# Per-resource counters live in plain lists indexed by the resource's wire value (1..4); slot 0
# is unused. ``CreditResource`` is an IntEnum, so a member indexes the list directly.
_SLOTS = max(_RESOURCES) + 1
assert list(_RESOURCES) == list(range(1, _SLOTS)), "_as_mapping zips the lists from slot 1"


def update_acceptance(
    last_sequence: int,
    sequence: int,
    previous_totals: Sequence[int],
    new_totals: Sequence[tuple[int, int]],
) -> UpdateDisposition | None:
    """The acceptance rule of a well-formed update (pure; docs/semantics.md#sender-ledger
    apply_update, rules 3-5).

    ``previous_totals[r]`` is the entry's grant total of resource ``r``; ``new_totals`` are the
    update's ``(resource, grant_total)`` pairs.

    1. ``sequence <= last_sequence`` → ``DUPLICATE_OR_OLD`` (before rule 2, so a replayed old
       update is harmless even if its totals are lower).
    2. Any present total below its previous one → ``None``: the update is refused (the ledger
       raises GrantDecreased).
    3. Otherwise ``SEQUENCE_GAP`` if numbers were skipped after the first accepted update
       (``last_sequence != 0``), else ``APPLIED``.

    pre: last_sequence >= 0 and sequence >= 1
    pre: all(0 <= r < len(previous_totals) for r, _ in new_totals)
    post: (__return__ is UpdateDisposition.DUPLICATE_OR_OLD) == (sequence <= last_sequence)
    post: (__return__ is None) == (sequence > last_sequence and any(a < previous_totals[r] for r, a in new_totals))
    post: (__return__ is UpdateDisposition.SEQUENCE_GAP) == (__return__ is not None and sequence > last_sequence != 0 and sequence != last_sequence + 1)
    """  # noqa: E501 (CrossHair reads each contract from one docstring line)
    # RFC: "Duplicate and old updates become no-ops" (checked before monotonicity).
    if sequence <= last_sequence:
        return UpdateDisposition.DUPLICATE_OR_OLD
    # RFC: "every cumulative grant is non-decreasing".
    for r, total in new_totals:
        if total < previous_totals[r]:
            return None
    if last_sequence != 0 and sequence != last_sequence + 1:
        return UpdateDisposition.SEQUENCE_GAP
    return UpdateDisposition.APPLIED


def _on(event: str) -> Mapping[TokenState, TokenState]:
    # Per-event views of the table, so the hot path does one lookup by state.
    return {state: nxt for (state, ev), nxt in TOKEN_TRANSITIONS.items() if ev == event}


_ON_RESERVE = _on("reserve")
_ON_COMMIT = _on("commit")
_ON_ROLLBACK = _on("rollback")


class _Entry:
    """Mutable state of one key at one epoch. Replaced (never reset) by a higher epoch."""

    __slots__ = ("consumed", "epoch", "fenced", "grant", "last_sequence", "returned", "snapshot")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.last_sequence = 0  # sequences start at 1, so 0 means "no update yet"
        self.grant = [0] * _SLOTS
        self.consumed = [0] * _SLOTS
        self.returned = [0] * _SLOTS
        self.fenced = False
        # the last snapshot ``entry`` made (immutable, so shared), dropped by every change of
        # grant, consumed, returned or sequence: the dispatch path asks for it many times per
        # transfer between changes
        self.snapshot: LedgerEntrySnapshot | None = None


class ReservationToken:
    """An opaque handle on one reserved charge, made only by ``SenderCreditLedger.try_reserve``.

    Read-only attributes: ``token_id`` (unique per ledger, from 1), ``key``, ``epoch``, ``charge``
    and ``state`` (:class:`TokenState`). Pass it to ``commit`` once the work was handed to a
    transport, or to ``rollback`` if it never was.
    """

    __slots__ = ("_charge", "_entry", "_key", "_ledger", "_state", "_token_id")

    def __init__(
        self,
        ledger: SenderCreditLedger,
        entry: _Entry,
        token_id: int,
        key: CreditKey,
        charge: CreditCharge,
    ) -> None:
        self._ledger = ledger
        self._entry = entry
        self._token_id = token_id
        self._key = key
        self._charge = charge
        self._state = TokenState.EMPTY

    @property
    def token_id(self) -> int:
        return self._token_id

    @property
    def key(self) -> CreditKey:
        return self._key

    @property
    def epoch(self) -> int:
        return self._entry.epoch

    @property
    def charge(self) -> CreditCharge:
        return self._charge

    @property
    def state(self) -> TokenState:
        return self._state

    def __repr__(self) -> str:
        return (
            f"ReservationToken(token_id={self._token_id}, key={self._key!r}, "
            f"epoch={self._entry.epoch}, state={self._state.name})"
        )


def _as_mapping(values: list[int]) -> Mapping[CreditResource, int]:
    # zip in C, not a comprehension: the resources are 1..4 in order (checked at import), and
    # a snapshot after every change of an entry builds three of these
    return types.MappingProxyType(dict(zip(_RESOURCES, values[1:], strict=True)))


def _check_charge(charge: object) -> None:
    if type(charge) is not CreditCharge:
        raise InvalidArgument(f"expected a CreditCharge, got {type(charge).__name__}")


def _check_epoch(epoch: int) -> None:
    check_u64(epoch, "epoch")
    if epoch == 0:
        raise InvalidArgument("epoch 0 is reserved (no epoch)")


class SenderCreditLedger:
    """Per-key cumulative receiver grants and the sender's consumption
    (docs/semantics.md#sender-ledger).

    Every call validates fully before it mutates: a raised exception leaves every entry and
    token exactly as it was (only the statistics counters of rejected calls move).
    """

    def __init__(self, *, max_entries: int) -> None:
        """Create an empty ledger holding at most ``max_entries`` keys.

        Raises :class:`InvalidArgument` unless ``max_entries`` is an int ≥ 1.
        """
        if type(max_entries) is not int or max_entries < 1:
            raise InvalidArgument(f"max_entries must be an int >= 1, got {describe(max_entries)}")
        self._max_entries = max_entries
        self._entries: dict[CreditKey, _Entry] = {}
        # The last key opened and its entry: an endpoint asks about its one key several times
        # per transfer, by the same object, and a CreditKey's hash is a Python call (attrs).
        # Set where an entry is installed, cleared where one is removed (_install, deactivate).
        self._hot: tuple[CreditKey, _Entry] | None = None
        self._next_token_id = 1
        self._updates_applied = 0
        self._duplicates_or_old = 0
        self._sequence_gaps = 0
        self._updates_rejected = 0
        self._epoch_resets = 0
        self._reservations = 0
        self._commits = 0
        self._rollbacks = 0
        self._blocked = 0
        self._returns = 0
        self._fenced_tokens = 0
        # moves with every change of what try_reserve reads (entries, grants, consumed,
        # returned): a caller that saw a charge blocked need not ask again until it moves
        self._changes = 0

    # -- entries --------------------------------------------------------------------------------

    def activate(self, key: CreditKey, epoch: int) -> None:
        """Open ``key`` at ``epoch`` (chosen by the receiver, docs/semantics.md#negotiation).

        1. ``epoch`` 0 or not a u64 → :class:`InvalidArgument`.
        2. A key without an entry gets a fresh one; if the ledger already holds ``max_entries``
           keys → :class:`TooManyRequests` (checked before allocation).
        3. An epoch lower than the entry's → :class:`InvalidEntry` (a stale activation).
        4. The same epoch → no-op; consumption is *not* reset.
        5. A higher epoch → a fresh entry replaces the old one (the epoch fence): tokens of the
           old epoch become fenced and its grants and consumption are gone.

        A failure changes nothing.
        """
        _check_key(key)
        _check_epoch(epoch)
        current = self._entries.get(key)
        if current is None:
            if len(self._entries) >= self._max_entries:
                raise TooManyRequests(f"ledger holds its maximum of {self._max_entries} entries")
            self._install(key, _Entry(epoch))
            self._changes += 1
            return
        if epoch < current.epoch:
            raise InvalidEntry(f"epoch {epoch} is older than the active epoch {current.epoch}")
        if epoch == current.epoch:
            return
        current.fenced = True
        self._install(key, _Entry(epoch))
        self._changes += 1
        self._epoch_resets += 1

    def _install(self, key: CreditKey, entry: _Entry) -> None:
        self._entries[key] = entry
        self._hot = (key, entry)

    def deactivate(self, key: CreditKey, epoch: int) -> None:
        """Remove ``key``'s entry at ``epoch`` and fence its tokens.

        ``epoch`` 0 or not a u64 → :class:`InvalidArgument`. A missing key is fine (no-op). An
        entry at another epoch → :class:`InvalidEntry`, so a late cleanup of an old epoch cannot
        erase a newer one. A failure changes nothing.
        """
        _check_key(key)
        _check_epoch(epoch)
        current = self._entries.get(key)
        if current is None:
            return
        if current.epoch != epoch:
            raise InvalidEntry(f"cannot deactivate epoch {epoch}: the entry is at {current.epoch}")
        current.fenced = True
        del self._entries[key]
        if self._hot is not None and self._hot[1] is current:
            self._hot = None
        self._changes += 1

    def entry(self, key: CreditKey) -> LedgerEntrySnapshot:
        """A snapshot of ``key``'s entry; :class:`InvalidEntry` if there is none."""
        if type(key) is not CreditKey:  # _check_key, inline: asked several times per transfer
            _check_key(key)
        hot = self._hot
        e = hot[1] if hot is not None and hot[0] is key else self._entries.get(key)
        if e is None:
            raise InvalidEntry(f"no ledger entry for {key!r}")
        if e.snapshot is not None:
            return e.snapshot
        e.snapshot = LedgerEntrySnapshot(
            key=key,
            epoch=e.epoch,
            last_sequence=e.last_sequence,
            has_update=e.last_sequence != 0,
            grant_total=_as_mapping(e.grant),
            consumed=_as_mapping(e.consumed),
            returned=_as_mapping(e.returned),
            available=self._available(e),
        )
        return e.snapshot

    def vectors(self, key: CreditKey) -> tuple[int, Sequence[int], Sequence[int], Sequence[int]]:
        """``key``'s last accepted sequence and its live grant, consumed and returned totals,
        each indexed by resource value (index 0 unused); :class:`InvalidEntry` if there is no
        entry.

        The sequences are the entry's own, valid until its next change: read them, never keep
        or change them. The sender endpoint reads its one key here between events instead of
        through :meth:`entry`, whose snapshot is rebuilt after every change (a reservation, an
        update): four mappings and a frozen record, twice per transfer
        (docs/benchmarks.md#credit-sender-vectors)."""
        hot = self._hot
        e = hot[1] if hot is not None and hot[0] is key else None
        if e is None:
            _check_key(key)
            e = self._entries.get(key)
            if e is None:
                raise InvalidEntry(f"no ledger entry for {key!r}")
        return e.last_sequence, e.grant, e.consumed, e.returned

    def available(self, key: CreditKey) -> Mapping[CreditResource, int]:
        """``grant_total − consumed − returned`` per resource.

        :class:`InvalidEntry` if there is no entry, or no update has arrived at its epoch yet:
        the ledger holds no authority to report then, as :meth:`try_reserve` fails closed
        (the reference's ``available`` answers the same; :meth:`entry` still reads the entry).
        """
        _check_key(key)
        e = self._entries.get(key)
        if e is None:
            raise InvalidEntry(f"no ledger entry for {key!r}")
        if e.last_sequence == 0:
            raise InvalidEntry(f"no update yet at epoch {e.epoch} of {key!r}")
        return self._available(e)

    def keys(self) -> tuple[CreditKey, ...]:
        """The keys with an entry, in the order they were first activated."""
        return tuple(self._entries)

    @property
    def changes(self) -> int:
        """A counter that moves with every change :meth:`try_reserve` could see (an entry
        opened, replaced or removed, a grant applied, a reservation, a rollback, a return). While
        it stands still, a charge that was blocked is still blocked for the same resources."""
        return self._changes

    def count_blocked(self) -> None:
        """Count a blocked reservation its caller answered itself, because :attr:`changes` had
        not moved since the same charge was blocked (the ``blocked`` statistic stays the number
        of blocked attempts)."""
        self._blocked += 1

    # -- grants ---------------------------------------------------------------------------------

    def apply_update(self, key: CreditKey, update: ReceiverCreditUpdate) -> UpdateDisposition:
        """Apply a receiver's cumulative grant vector to ``key`` (docs/semantics.md#sender-ledger
        apply_update).

        1. Validate the whole update first → :class:`InvalidArgument`: schema version, epoch ≠ 0,
           sequence ≠ 0, session and QoS class equal to the key's, at most four grants, each a
           known resource named once.
        2. No entry for ``key``, or an entry at another epoch → :class:`InvalidEntry`.
        3. ``sequence <= last accepted`` → ``DUPLICATE_OR_OLD``, nothing changes (before rule 4,
           so a replayed old update is harmless even if its totals are lower).
        4. A present grant below its previous total → :class:`GrantDecreased` (an
           InvalidArgument and RemoteProtocolError). This also rejects a grant below
           ``consumed + returned``: the ledger keeps ``consumed + returned <= grant_total``, so
           any such grant is below the previous total too.
        5. Otherwise the present totals replace the old ones (omitted resources keep theirs) and
           the sequence is recorded: ``APPLIED``, or ``SEQUENCE_GAP`` if it skipped numbers after
           the first accepted update (the first may carry any sequence ≥ 1).

        A raised exception changes nothing but the ``updates_rejected`` counter.
        """
        try:
            _check_key(key)
            if type(update) is not ReceiverCreditUpdate:
                raise InvalidArgument(
                    f"expected a ReceiverCreditUpdate, got {type(update).__name__}"
                )
            if update.schema_version != SCHEMA_VERSION:
                raise InvalidArgument(
                    f"unsupported schema_version {describe(update.schema_version)}"
                )
            epoch = update.epoch
            sequence = update.sequence
            if epoch == 0:
                raise InvalidArgument("update epoch must not be 0")
            if sequence == 0:
                raise InvalidArgument("update sequence must not be 0")
            if update.receiver_session_id.value != key.receiver_session.value:
                raise InvalidArgument("update names another receiver session than the key")
            if update.qos_class != key.qos_class:
                raise InvalidArgument("update names another QoS class than the key")
            grants = update.grants
            if len(grants) > MAX_RESOURCES_PER_MESSAGE:
                raise InvalidArgument(
                    f"update carries more than {MAX_RESOURCES_PER_MESSAGE} grants"
                )
            seen = 0
            for g in grants:
                if type(g) is not CreditAmount:
                    raise InvalidArgument(f"grants must be CreditAmount values, got {describe(g)}")
                r = g.resource
                if type(r) is not CreditResource:
                    raise InvalidArgument(f"unknown credit resource {describe(r)}")
                if seen & (1 << r):
                    raise InvalidArgument(f"update names {r.name} twice")
                seen |= 1 << r
            hot = self._hot
            e = hot[1] if hot is not None and hot[0] is key else self._entries.get(key)
            if e is None:
                raise InvalidEntry(f"no ledger entry for {key!r}")
            if e.epoch != epoch:
                raise InvalidEntry(f"update epoch {epoch} does not match the entry's {e.epoch}")
            grant = e.grant
            disposition = update_acceptance(
                e.last_sequence, sequence, grant, [(g.resource, g.amount) for g in grants]
            )
            if disposition is UpdateDisposition.DUPLICATE_OR_OLD:
                self._duplicates_or_old += 1
                return disposition
            if disposition is None:
                r, total = next(
                    (g.resource, g.amount) for g in grants if g.amount < grant[g.resource]
                )
                raise GrantDecreased(
                    f"{r.name} grant_total {total} is below the previous {grant[r]}"
                )
        except CreditError:
            self._updates_rejected += 1
            raise
        for g in grants:
            grant[g.resource] = g.amount
        e.last_sequence = sequence
        e.snapshot = None
        self._changes += 1
        self._updates_applied += 1
        if disposition is UpdateDisposition.SEQUENCE_GAP:
            self._sequence_gaps += 1
        return disposition

    # -- reservations ---------------------------------------------------------------------------

    def try_reserve(self, key: CreditKey, charge: CreditCharge) -> ReservationToken | Blocked:
        """Reserve the whole ``charge`` against ``key`` at once, or nothing.

        1. ``key`` not a CreditKey or ``charge`` not a CreditCharge → :class:`InvalidArgument`
           (a CreditCharge is non-empty with unique known resources and amounts > 0 by
           construction).
        2. No entry, or no update accepted yet → :class:`InvalidEntry`.
        3. Any resource with ``available < amount`` → a :class:`Blocked` value naming *every*
           such resource; nothing is consumed (RFC "Atomic multi-resource eligibility").
        4. Otherwise every amount is consumed and a RESERVED token is returned.
        """
        _check_key(key)
        _check_charge(charge)
        hot = self._hot
        e = hot[1] if hot is not None and hot[0] is key else self._entries.get(key)
        if e is None:
            raise InvalidEntry(f"no ledger entry for {key!r}")
        if e.last_sequence == 0:
            raise InvalidEntry(f"no credit update accepted yet for {key!r}")
        grant, consumed, returned = e.grant, e.consumed, e.returned
        parts = charge.parts
        exhausted: list[CreditResource] | None = None
        for r, amount in parts:
            if amount > grant[r] - consumed[r] - returned[r]:
                if exhausted is None:
                    exhausted = []
                exhausted.append(r)
        if exhausted is not None:
            self._blocked += 1
            return Blocked(key=key, exhausted=tuple(exhausted))
        for r, amount in parts:
            # Cannot overflow: amount <= available, so consumed + amount <= grant_total <= u64 max.
            consumed[r] += amount
        e.snapshot = None
        self._changes += 1
        token = ReservationToken(self, e, self._next_token_id, key, charge)
        token._state = _ON_RESERVE[token._state]
        self._next_token_id += 1
        self._reservations += 1
        return token

    def commit(self, token: ReservationToken) -> None:
        """Mark ``token``'s work as handed to a transport: RESERVED → COMMITTED.

        The credit stays consumed; the receiver's next cumulative grant is the only way it comes
        back. Raises :class:`InvalidArgument` for a non-token, :class:`InvalidEntry` for a token
        of another ledger, a fenced token, or a token not RESERVED. A failure changes nothing.
        """
        nxt = self._next_token_state(token, _ON_COMMIT, "commit")
        token._state = nxt
        self._commits += 1

    def rollback(self, token: ReservationToken) -> None:
        """Undo a reservation whose work was never handed to a transport: RESERVED → ROLLED_BACK.

        ``consumed`` drops by exactly the token's charge. Raises like :meth:`commit`; an
        underflow of ``consumed`` → :class:`InvalidArgument` (ArithmeticOverflow; checked per
        docs/semantics.md#sender-ledger, though a token only ever subtracts what it added). A
        failure changes nothing.
        """
        nxt = self._next_token_state(token, _ON_ROLLBACK, "rollback")
        consumed = token._entry.consumed
        parts = token._charge.parts
        after = [checked_sub(consumed[r], amount) for r, amount in parts]
        for (r, _), value in zip(parts, after, strict=True):
            consumed[r] = value
        token._entry.snapshot = None
        self._changes += 1
        token._state = nxt
        self._rollbacks += 1

    def _next_token_state(
        self, token: ReservationToken, table: Mapping[TokenState, TokenState], event: str
    ) -> TokenState:
        if type(token) is not ReservationToken:
            raise InvalidArgument(f"expected a ReservationToken, got {type(token).__name__}")
        if token._ledger is not self:
            raise InvalidEntry("the token was issued by another ledger")
        if token._entry.fenced:
            self._fenced_tokens += 1
            raise InvalidEntry(
                f"token {token._token_id} belongs to a fenced entry "
                f"({token._key!r} at epoch {token._entry.epoch})"
            )
        nxt = table.get(token._state)
        if nxt is None:
            raise InvalidEntry(
                f"cannot {event} token {token._token_id} in state {token._state.name}"
            )
        return nxt

    # -- returns --------------------------------------------------------------------------------

    def return_credit(self, key: CreditKey, charge: CreditCharge) -> None:
        """Give unused credit back: ``returned[r] += amount`` for each part of ``charge``.

        ``returned`` is cumulative (reported in ``SenderCreditUsage``, so a duplicated report
        cannot double-count). Raises :class:`InvalidArgument` for a bad key or charge,
        :class:`InvalidEntry` when there is no entry or no update yet, and
        :class:`InsufficientCredit` (TooManyRequests; ``exhausted`` names the resources) when a
        part exceeds what is available. A failure changes nothing.
        """
        _check_key(key)
        _check_charge(charge)
        e = self._entries.get(key)
        if e is None:
            raise InvalidEntry(f"no ledger entry for {key!r}")
        if e.last_sequence == 0:
            raise InvalidEntry(f"no credit update accepted yet for {key!r}")
        grant, consumed, returned = e.grant, e.consumed, e.returned
        parts = charge.parts
        exhausted = tuple(r for r, amount in parts if amount > grant[r] - consumed[r] - returned[r])
        if exhausted:
            raise InsufficientCredit(
                f"cannot return more than is available for {', '.join(r.name for r in exhausted)}",
                exhausted,
            )
        after = [checked_add(returned[r], amount) for r, amount in parts]
        for (r, _), value in zip(parts, after, strict=True):
            returned[r] = value
        e.snapshot = None
        self._changes += 1
        self._returns += 1

    # -- statistics -----------------------------------------------------------------------------

    @staticmethod
    def _available(e: _Entry) -> Mapping[CreditResource, int]:
        return types.MappingProxyType(
            {r: e.grant[r] - e.consumed[r] - e.returned[r] for r in _RESOURCES}
        )

    def statistics(self) -> LedgerStatistics:
        """A frozen snapshot of the counters and the per-resource totals over live entries."""
        granted = dict.fromkeys(_RESOURCES, 0)
        consumed = dict.fromkeys(_RESOURCES, 0)
        returned = dict.fromkeys(_RESOURCES, 0)
        for e in self._entries.values():
            for r in _RESOURCES:
                granted[r] += e.grant[r]
                consumed[r] += e.consumed[r]
                returned[r] += e.returned[r]
        available = {r: granted[r] - consumed[r] - returned[r] for r in _RESOURCES}
        return LedgerStatistics(
            entries=len(self._entries),
            updates_applied=self._updates_applied,
            duplicates_or_old=self._duplicates_or_old,
            sequence_gaps=self._sequence_gaps,
            updates_rejected=self._updates_rejected,
            epoch_resets=self._epoch_resets,
            reservations=self._reservations,
            commits=self._commits,
            rollbacks=self._rollbacks,
            blocked=self._blocked,
            returns=self._returns,
            fenced_tokens=self._fenced_tokens,
            granted=types.MappingProxyType(granted),
            consumed=types.MappingProxyType(consumed),
            returned=types.MappingProxyType(returned),
            available=types.MappingProxyType(available),
        )
