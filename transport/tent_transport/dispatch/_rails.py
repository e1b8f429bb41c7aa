"""The rail side of the dispatch core: slices waiting for a QP slot, posted slices, meters.

One :class:`RailSet` holds every rail of an engine with its ``tent_sched.NicDevice`` (both
bandwidth series). Every decision is a call into ``tent_sched``: rail choice reads the
selection EWMA (:func:`tent_sched.score_devices`), the post order is
:func:`tent_sched.order_tiers` over the NIC's transmit estimate and posted bytes, and the QP
budget cut is :func:`tent_sched.postable_prefix`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tent_sched import (
    MeterParams,
    NicDevice,
    NicSet,
    Slice,
    order_tiers,
    postable_prefix,
    score_devices,
)

from ..devices._base import Device, SliceCompletion, SliceStatus
from ..errors import InvalidArgument, PostRefused
from ._records import PendingSlice, RailStatistics, TransferRecord

__all__ = ["RailSet"]


class _Rail:
    __slots__ = (
        "completions",
        "device",
        "failed",
        "nic",
        "outstanding",
        "posts",
        "refusals",
        "samples",
        "unknown",
        "waiting",
        "waiting_bytes",
    )

    def __init__(self, device: Device, nic: NicDevice) -> None:
        self.device = device
        self.nic = nic
        self.waiting: list[PendingSlice] = []  # arrival order
        self.waiting_bytes = 0
        self.outstanding: dict[int, PendingSlice] = {}  # wr_id -> slice, posting order
        self.posts = 0
        self.refusals = 0
        self.completions = 0
        self.failed = 0
        self.unknown = 0
        self.samples = 0


Ended = Callable[[PendingSlice, SliceStatus, str, int], None]
"""Called for every slice that ended: (slice, status, detail, now_ns)."""


class RailSet:
    """The rails of one engine and their meters (one ``NicDevice`` per rail, in a ``NicSet``)."""

    def __init__(
        self, rails: Sequence[Device], params: MeterParams, *, max_qp_wr: int, arbitration: bool
    ) -> None:
        """Raises InvalidArgument for no rails, a non-Device, or two rails of one name."""
        if not rails:
            raise InvalidArgument("an engine needs at least one rail")
        self._nics = NicSet(params)
        self._rails: list[_Rail] = []
        for device in rails:
            if not isinstance(device, Device):
                raise InvalidArgument(f"rail {device!r} does not implement the Device protocol")
            name = device.name
            if name in self._nics:
                raise InvalidArgument(f"two rails are named {name!r}")
            nic = self._nics.add_device(name, link_speed_gbps=device.link_speed_gbps)
            self._rails.append(_Rail(device, nic))
        self._max_qp_wr = max_qp_wr
        self._arbitration = arbitration

    @property
    def devices(self) -> tuple[Device, ...]:
        return tuple(rail.device for rail in self._rails)

    def estimated_bandwidth_bps(self) -> float:
        """The admission drop's provider: the sum of the rails' transmit estimates (or -1)."""
        return self._nics.estimated_bandwidth_bps()

    # ---------------------------------------------------------------- assignment

    def choose(self, length: int) -> int:
        """The rail for a slice of ``length`` bytes: the lowest predicted time on the selection
        EWMA (:func:`tent_sched.score_devices`, posted bytes in), plus the bytes already
        assigned to that rail and not yet posted (the reference's inflight charge includes the
        worker queue; without it one pass would send every slice to the same rail)."""
        scores = score_devices(self._nics, length)
        best, best_time = 0, 0.0
        for index, rail in enumerate(self._rails):
            predicted = scores[rail.nic.name] + rail.waiting_bytes / rail.nic.selection_bps
            if index == 0 or predicted < best_time:
                best, best_time = index, predicted
        return best

    def enqueue(self, item: PendingSlice) -> None:
        rail = self._rails[item.rail]
        rail.waiting.append(item)
        rail.waiting_bytes += item.request.length

    def withdraw(self, items: set[PendingSlice]) -> None:
        """Remove waiting slices (a canceled or failed transfer's) from their rails."""
        for rail in self._rails:
            kept = [item for item in rail.waiting if item not in items]
            if len(kept) != len(rail.waiting):
                rail.waiting = kept
                rail.waiting_bytes = sum(item.request.length for item in kept)

    def posted_of(self, record: TransferRecord) -> dict[int, list[int]]:
        """The wr_ids of ``record``'s posted, not yet completed slices, by rail index."""
        out: dict[int, list[int]] = {}
        for index, rail in enumerate(self._rails):
            ids = [wr_id for wr_id, item in rail.outstanding.items() if item.owner is record]
            if ids:
                out[index] = ids
        return out

    def has_waiting(self) -> bool:
        return any(rail.waiting for rail in self._rails)

    def has_unscheduled(self) -> bool:
        """Whether a rail holds posted slices without naming when they complete: an
        asynchronous device, whose completions are seen only when it is polled (a NIC without
        a completion channel never wakes the driver)."""
        return any(
            rail.outstanding and rail.device.next_completion_ns() is None for rail in self._rails
        )

    def next_completion_ns(self) -> int | None:
        due = [
            d for d in (rail.device.next_completion_ns() for rail in self._rails) if d is not None
        ]
        return min(due) if due else None

    # ---------------------------------------------------------------- posting

    def post_all(self, now_ns: int, posted: Callable[[PendingSlice], None], ended: Ended) -> None:
        """Post, on every rail, the QP-budget prefix of its waiting slices in arbitration order.

        Per rail: the order is :func:`tent_sched.order_tiers` over the NIC's transmit estimate
        and posted bytes when arbitration is on, else arrival order (seed: "off, the post order
        is exactly the arrival order"). Then, per peer (one QP each) in order of first
        appearance, the prefix within ``Device.post_budget`` goes out as one chained post. A
        refusal because the QP is not ready keeps the slices waiting for a later pass; a refusal
        of a ready device fails them (``ended``). ``posted`` is called for each posted slice.
        """
        for rail in self._rails:
            if rail.waiting:
                self._post_rail(rail, now_ns, posted, ended)

    def _post_rail(
        self, rail: _Rail, now_ns: int, posted: Callable[[PendingSlice], None], ended: Ended
    ) -> None:
        waiting = rail.waiting
        if self._arbitration:
            nic = rail.nic
            candidates = [
                Slice(
                    length=item.request.length,
                    deadline_ns=item.request.deadline_ns,
                    priority=item.request.priority,
                    ident=index,
                )
                for index, item in enumerate(waiting)
            ]
            order = order_tiers(candidates, nic.transmit_bps, nic.posted_bytes, now_ns)
        else:
            order = list(range(len(waiting)))
        by_peer: dict[int, list[int]] = {}
        for index in order:
            by_peer.setdefault(waiting[index].request.peer, []).append(index)
        gone: set[PendingSlice] = set()
        refused: list[tuple[PendingSlice, str]] = []
        for peer, indices in by_peer.items():
            budget = min(max(rail.device.post_budget(peer), 0), self._max_qp_wr)
            batch, _later = postable_prefix(
                indices, max_qp_wr=self._max_qp_wr, outstanding_wr=self._max_qp_wr - budget
            )
            if not batch:
                continue
            items = [waiting[index] for index in batch]
            try:
                rail.device.post([item.request for item in items], now_ns)
            except PostRefused as exc:
                rail.refusals += 1
                if exc.ready:  # a malformed post to a ready device: those slices cannot go
                    gone.update(items)
                    refused.extend((item, f"post refused: {exc}") for item in items)
                continue
            rail.posts += 1
            gone.update(items)
            for item in items:
                item.submit_ns = now_ns
                rail.nic.note_posted(item.request.length, now_ns)
                rail.outstanding[item.request.wr_id] = item
                posted(item)
        if gone:
            rail.waiting = [item for item in rail.waiting if item not in gone]
            rail.waiting_bytes = sum(item.request.length for item in rail.waiting)
        # After the rail's state is consistent: ending a slice may withdraw its siblings.
        for item, detail in refused:
            ended(item, SliceStatus.TRANSPORT_ERROR, detail, now_ns)

    # ---------------------------------------------------------------- completions

    def poll_all(self, now_ns: int, max_entries: int, ended: Ended) -> int:
        """One poll pass at ``now_ns`` (one timestamp for the whole pass); returns completions.

        Per completion: the NIC's posted bytes end (``note_post_ended``) and the completion is
        recorded (``note_completed``: a success feeds the selection EWMA; a failure resets the
        transmit meter). After a rail's last completion of the pass, ``maybe_sample_transmit``.
        A completion for a wr_id that is not outstanding is counted and ignored.
        """
        total = 0
        for rail in self._rails:
            completions = rail.device.poll(max_entries, now_ns)
            if not completions:
                continue
            for completion in completions:
                self._complete(rail, completion, now_ns, ended)
            total += len(completions)
            if rail.nic.maybe_sample_transmit(now_ns):
                rail.samples += 1
        return total

    def _complete(
        self, rail: _Rail, completion: SliceCompletion, now_ns: int, ended: Ended
    ) -> None:
        item = (
            rail.outstanding.pop(completion.wr_id, None)
            if isinstance(completion, SliceCompletion)
            else None
        )
        if item is None:
            rail.unknown += 1
            return
        length = item.request.length
        status, detail = completion.status, completion.detail
        if status.moved and completion.length != length:
            status, detail = (
                SliceStatus.TRANSPORT_ERROR,
                (f"completion reports {completion.length} bytes of a {length}-byte slice"),
            )
        rail.completions += 1
        if not status.moved:
            rail.failed += 1
        rail.nic.note_post_ended(length, now_ns)
        rail.nic.note_completed(
            length, submit_ns=item.submit_ns, poll_ns=now_ns, success=status.moved
        )
        ended(item, status, detail, now_ns)

    # ---------------------------------------------------------------- statistics

    def statistics(self) -> tuple[RailStatistics, ...]:
        return tuple(
            RailStatistics(
                name=rail.nic.name,
                nic=rail.nic.statistics(),
                waiting_slices=len(rail.waiting),
                waiting_bytes=rail.waiting_bytes,
                posted_slices=len(rail.outstanding),
                posts=rail.posts,
                post_refusals=rail.refusals,
                completions=rail.completions,
                failed_completions=rail.failed,
                unknown_completions=rail.unknown,
                transmit_samples_taken=rail.samples,
            )
            for rail in self._rails
        )
