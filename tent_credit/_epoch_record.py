"""One key+epoch of the receiver's allocator: its id, its record and the record's state machine.

What the allocator keeps per ``(sender_peer, qos_class, epoch)`` (:class:`_EpochRecord`, a
frozen value replaced whole on every mutation), what it keeps per key (:class:`_KeyState`), the
checks of the ids, and the table of allowed ``(state, event)`` steps
(docs/semantics.md#receiver-allocator). Separate from :mod:`._allocator` because none of it
reads the allocator's totals: the rules of one epoch read without the capacity bookkeeping over
all of them.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from ._allocator_config import AllocationClass, EpochState, ResourceVector
from ._arith import U32_MAX, U64_MAX
from ._describe import describe
from ._types import CreditResource, _IdentityEnum
from .errors import InvalidArgument, InvalidEntry


class _Event(_IdentityEnum):
    GRANT = "grant"
    REPORT_USAGE = "report_usage"
    LAND = "land"
    RELEASE = "release"
    FENCE = "fence"
    COMPLETE_FENCE = "complete_fence"


# Every allowed (state, event) pair and the state it leads to; a missing pair is refused with
# InvalidEntry (as h11's ``_state.py``). docs/semantics.md#receiver-allocator: grants only in a live
# epoch; a fenced epoch's unlanded credit is reclaimed only once its in-flight work is drained
# (COMPLETE_FENCE), after which nothing can land and no report can reclaim it a second time; landed
# data can always be released, whatever the epoch's state.
_EPOCH_TRANSITIONS: dict[tuple[EpochState, _Event], EpochState] = {
    (EpochState.ACTIVE, _Event.GRANT): EpochState.ACTIVE,
    (EpochState.ACTIVE, _Event.REPORT_USAGE): EpochState.ACTIVE,
    (EpochState.ACTIVE, _Event.LAND): EpochState.ACTIVE,
    (EpochState.ACTIVE, _Event.RELEASE): EpochState.ACTIVE,
    (EpochState.ACTIVE, _Event.FENCE): EpochState.FENCING,
    (EpochState.FENCING, _Event.REPORT_USAGE): EpochState.FENCING,
    (EpochState.FENCING, _Event.LAND): EpochState.FENCING,
    (EpochState.FENCING, _Event.RELEASE): EpochState.FENCING,
    (EpochState.FENCING, _Event.FENCE): EpochState.FENCING,
    (EpochState.FENCING, _Event.COMPLETE_FENCE): EpochState.FENCED,
    (EpochState.FENCED, _Event.RELEASE): EpochState.FENCED,
    (EpochState.FENCED, _Event.FENCE): EpochState.FENCED,
}


@attrs.frozen(kw_only=True)
class _EpochRecord:
    """Accounting of one key+epoch; replaced whole on every mutation (validate, then commit)."""

    allocation_class: AllocationClass
    state: EpochState
    granted: ResourceVector
    consumed_reported: ResourceVector
    returned_reported: ResourceVector
    landed: ResourceVector
    released: ResourceVector
    reclaimed_by_return: ResourceVector
    reclaimed_by_fence: ResourceVector

    def outstanding(self, resource: CreditResource) -> int:
        # Plain ints on purpose: a negative result is caught by the commit check, never wrapped.
        return (
            self.granted[resource]
            - self.released[resource]
            - self.reclaimed_by_return[resource]
            - self.reclaimed_by_fence[resource]
        )

    def replace(
        self,
        *,
        state: EpochState,
        granted: ResourceVector | None = None,
        consumed_reported: ResourceVector | None = None,
        returned_reported: ResourceVector | None = None,
        landed: ResourceVector | None = None,
        released: ResourceVector | None = None,
        reclaimed_by_return: ResourceVector | None = None,
        reclaimed_by_fence: ResourceVector | None = None,
    ) -> _EpochRecord:
        """This record with ``state`` and the totals given (``None``: unchanged).

        ``attrs.evolve`` does the same by introspecting the fields on every call; a record is
        replaced on every grant, landing and release, so this spells them out (a sixth of the
        receiver's calls per transfer went to ``evolve``)."""
        return _EpochRecord(
            allocation_class=self.allocation_class,
            state=state,
            granted=self.granted if granted is None else granted,
            consumed_reported=(
                self.consumed_reported if consumed_reported is None else consumed_reported
            ),
            returned_reported=(
                self.returned_reported if returned_reported is None else returned_reported
            ),
            landed=self.landed if landed is None else landed,
            released=self.released if released is None else released,
            reclaimed_by_return=(
                self.reclaimed_by_return if reclaimed_by_return is None else reclaimed_by_return
            ),
            reclaimed_by_fence=(
                self.reclaimed_by_fence if reclaimed_by_fence is None else reclaimed_by_fence
            ),
        )

    def settled(self) -> bool:
        """Fenced and holding nothing: the record can be forgotten."""
        return self.state is EpochState.FENCED and all(
            self.outstanding(r) == 0 for r in self.granted
        )


def _fresh_record(
    allocation_class: AllocationClass, resources: Iterable[CreditResource]
) -> _EpochRecord:
    """The record of a newly opened epoch: ACTIVE, every total 0 for each modelled resource."""
    zero = dict.fromkeys(resources, 0)
    return _EpochRecord(
        allocation_class=allocation_class,
        state=EpochState.ACTIVE,
        granted=zero,
        consumed_reported=zero,
        returned_reported=zero,
        landed=zero,
        released=zero,
        reclaimed_by_return=zero,
        reclaimed_by_fence=zero,
    )


def _next_state(record: _EpochRecord, event: _Event) -> EpochState:
    """The state ``event`` leads ``record`` to; :class:`InvalidEntry` if the table has no step."""
    try:
        return _EPOCH_TRANSITIONS[(record.state, event)]
    except KeyError:
        raise InvalidEntry(
            f"{event.value} is not allowed in epoch state {record.state.name}"
        ) from None


@attrs.define
class _KeyState:
    current_epoch: int
    allocation_class: AllocationClass


_EpochId = tuple[int, int, int]  # (sender_peer, qos_class, epoch)


def _check_sender(sender_peer: object) -> int:
    if type(sender_peer) is not int or not 0 <= sender_peer <= U64_MAX:
        raise InvalidArgument(f"sender_peer must be a u64 int, got {describe(sender_peer)}")
    return sender_peer


def _check_qos(qos_class: object) -> int:
    if type(qos_class) is not int or not 0 <= qos_class <= U32_MAX:
        raise InvalidArgument(f"qos_class must be a u32 int, got {describe(qos_class)}")
    return qos_class


def _check_epoch(epoch: object) -> int:
    if type(epoch) is not int or not 0 < epoch <= U64_MAX:
        raise InvalidArgument(f"epoch must be a non-zero u64 int, got {describe(epoch)}")
    return epoch
