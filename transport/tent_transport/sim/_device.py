"""A simulated rail: one link served in posting order, in virtual time (issue 14).

The link moves one slice at a time, in the order slices were posted (across its QPs): a slice
posted at ``t`` starts at ``max(t, link free)`` and takes ``length / rate + overhead_ns``. A
slice's completion becomes visible to ``poll`` at the first completion batch boundary at or
after it finished (``completion_batch_ns``; 0 = at once), so completions are batched per poll
pass as a real CQ poller batches them. The link rate may change over time (a slowing link).

Faults, for the known-limit scenarios (deterministic, chosen by slice posting index):

* ``lose_every``: every n-th slice never completes (a quarantined owner: it keeps its bytes
  and its QP slot for ever).
* ``failover_every`` / ``failover_ns``: every n-th slice fails on this path and is recovered by
  a slower one (TENT's transport failover under the engine): it completes ``failover_ns``
  later, successfully, without occupying the link meanwhile. This is the one case where
  completions leave posting order (the recovery path is not this QP).

Nothing here reads a clock: ``now_ns`` comes from the driver; time never goes backwards.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence

import attrs

from ..devices._base import SliceCompletion, SliceRequest, SliceStatus
from ..errors import InvalidArgument, PostRefused

__all__ = ["LinkSpec", "SimDevice"]


def _positive(_inst: object, attr: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidArgument(f"{attr.name} must be a number > 0, got {value!r}")
    if not math.isfinite(value):
        raise InvalidArgument(f"{attr.name} must be finite, got {value!r}")


def _count(minimum: int) -> Callable[[object, attrs.Attribute[int], int], None]:
    def check(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
        if type(value) is not int or value < minimum:
            raise InvalidArgument(f"{attr.name} must be an int >= {minimum}, got {value!r}")

    return check


def _changes(
    _inst: object, _attr: attrs.Attribute[tuple[tuple[int, float], ...]], value: object
) -> None:
    if type(value) is not tuple:
        raise InvalidArgument("rate_changes must be a tuple of (at_ns, bytes_per_ns) pairs")
    last = -1
    for item in value:
        if (
            type(item) is not tuple
            or len(item) != 2
            or type(item[0]) is not int
            or isinstance(item[1], bool)
            or not isinstance(item[1], int | float)
            or not item[1] > 0
            or not math.isfinite(item[1])
        ):
            raise InvalidArgument(f"rate change must be (int at_ns, rate > 0), got {item!r}")
        if item[0] <= last:
            raise InvalidArgument("rate changes must be in strictly increasing time order")
        last = item[0]


@attrs.frozen(kw_only=True)
class LinkSpec:
    """One simulated NIC. ``bytes_per_ns`` 8 is 64 Gb/s; the seed link speed reported to the
    meters is ``bytes_per_ns × 8`` Gb/s. Raises InvalidArgument for an invalid field."""

    name: str = attrs.field()
    bytes_per_ns: float = attrs.field(validator=_positive)
    max_qp_wr: int = attrs.field(default=256, validator=_count(1))
    cq_depth: int = attrs.field(default=4096, validator=_count(1))
    slice_overhead_ns: int = attrs.field(default=0, validator=_count(0))
    completion_batch_ns: int = attrs.field(default=0, validator=_count(0))
    rate_changes: tuple[tuple[int, float], ...] = attrs.field(default=(), validator=_changes)
    lose_every: int = attrs.field(default=0, validator=_count(0))
    failover_every: int = attrs.field(default=0, validator=_count(0))
    failover_ns: int = attrs.field(default=0, validator=_count(0))

    @name.validator
    def _check_name(self, _attr: attrs.Attribute[str], value: object) -> None:
        if type(value) is not str or not value:
            raise InvalidArgument(f"name must be a non-empty str, got {value!r}")


class SimDevice:
    """A :class:`~tent_transport.devices.Device` in virtual time (see the module docstring)."""

    def __init__(self, spec: LinkSpec) -> None:
        if not isinstance(spec, LinkSpec):
            raise InvalidArgument(f"spec must be a LinkSpec, got {type(spec).__name__}")
        self._spec = spec
        self._change_at = [at for at, _ in spec.rate_changes]
        self._free_ns = 0  # when the link finishes its last accepted slice
        self._last_now = 0
        self._posted = 0  # slices posted so far (fault selection index)
        self._outstanding: dict[int, int] = {}  # peer -> slices posted and not yet polled
        self._unpolled = 0
        # (visible_ns, seq, completion): ordered by visibility; seq keeps posting order on ties
        self._done: list[tuple[int, int, SliceCompletion]] = []
        self._done_head = 0
        self._peer_of: dict[int, tuple[int, int]] = {}  # wr_id -> (peer, length), posting order
        self._lost = 0
        self._closed = False
        self._busy_ns = 0
        self._moved_bytes = 0

    # ---------------------------------------------------------------- Device protocol

    @property
    def name(self) -> str:
        return self._spec.name

    @property
    def link_speed_gbps(self) -> float:
        return self._spec.bytes_per_ns * 8

    @property
    def spec(self) -> LinkSpec:
        return self._spec

    def post_budget(self, peer: int) -> int:
        if self._closed:
            return 0
        free_cq = self._spec.cq_depth - self._unpolled
        return max(0, min(free_cq, self._spec.max_qp_wr - self._outstanding.get(peer, 0)))

    def post(self, slices: Sequence[SliceRequest], now_ns: int) -> None:
        self._advance(now_ns)
        if not slices:
            return
        peer = slices[0].peer
        if any(item.peer != peer for item in slices):
            raise PostRefused("one chained post names one peer", ready=True)
        if self._closed:
            raise PostRefused(f"{self.name} is closed", ready=False)
        if len(slices) > self.post_budget(peer):
            raise PostRefused(
                f"{len(slices)} slices exceed the budget {self.post_budget(peer)}", ready=True
            )
        spec = self._spec
        for item in slices:
            self._posted += 1
            index = self._posted
            self._outstanding[peer] = self._outstanding.get(peer, 0) + 1
            self._unpolled += 1
            self._peer_of[item.wr_id] = (peer, item.length)
            if spec.lose_every and index % spec.lose_every == 0:
                self._lost += 1  # never completes: holds its QP slot and CQ entry for ever
                continue
            if spec.failover_every and index % spec.failover_every == 0:
                finish = now_ns + spec.failover_ns  # recovered off this link
            else:
                start = max(now_ns, self._free_ns)
                wire = math.ceil(item.length / self._rate_at(start)) + spec.slice_overhead_ns
                finish = start + wire
                self._free_ns = finish
                self._busy_ns += wire
                self._moved_bytes += item.length
            completion = SliceCompletion(
                wr_id=item.wr_id, status=SliceStatus.SUCCESS, length=item.length
            )
            self._push(self._visible(finish), completion)

    def poll(self, max_entries: int, now_ns: int) -> list[SliceCompletion]:
        self._advance(now_ns)
        out: list[SliceCompletion] = []
        done = self._done
        while self._done_head < len(done) and len(out) < max_entries:
            visible, _seq, completion = done[self._done_head]
            if visible > now_ns:
                break
            self._done_head += 1
            out.append(completion)
            peer, _length = self._peer_of.pop(completion.wr_id)
            self._outstanding[peer] -= 1
            self._unpolled -= 1
        if self._done_head > 1024 and 2 * self._done_head > len(done):
            del done[: self._done_head]
            self._done_head = 0
        return out

    def cancel(self, wr_ids: Sequence[int], now_ns: int) -> None:
        """:class:`~tent_transport.devices.Cancellable`: every named slice not yet finished
        completes CANCELED, visible at ``now_ns`` but never before a completion queued ahead of
        it (completions keep their order); a lost slice completes CANCELED after them. The link
        time such a slice had booked is not given back (the simulated wire does not rewind).
        Unknown or already polled ids are ignored."""
        self._advance(now_ns)
        targets = {wr_id for wr_id in wr_ids if wr_id in self._peer_of}
        if not targets:
            return
        floor = now_ns
        entries = self._done[self._done_head :]
        for position, (visible, seq, completion) in enumerate(entries):
            shown = visible
            if completion.wr_id in targets:
                targets.discard(completion.wr_id)
                if visible > now_ns:
                    shown = max(now_ns, floor)
                    canceled = attrs.evolve(completion, status=SliceStatus.CANCELED)
                    entries[position] = (shown, seq, canceled)
            floor = max(floor, shown)
        for wr_id in sorted(targets, key=list(self._peer_of).index):  # lost: posting order
            _peer, length = self._peer_of[wr_id]
            canceled = SliceCompletion(wr_id=wr_id, status=SliceStatus.CANCELED, length=length)
            entries.append((floor, self._posted, canceled))
        self._done[self._done_head :] = entries

    def next_completion_ns(self) -> int | None:
        if self._done_head < len(self._done):
            return self._done[self._done_head][0]
        return None

    def set_wakeup(self, callback: Callable[[], None] | None) -> None:
        """Virtual time: the driver asks :meth:`next_completion_ns`; no wake-up needed."""

    def close(self) -> None:
        """Flush: every slice not yet polled (lost ones included) completes FLUSHED now."""
        if self._closed:
            return
        self._closed = True
        del self._done[self._done_head :]
        for wr_id, (_peer, length) in self._peer_of.items():
            flushed = SliceCompletion(wr_id=wr_id, status=SliceStatus.FLUSHED, length=length)
            self._done.append((self._last_now, 0, flushed))

    # ---------------------------------------------------------------- observation

    @property
    def lost_slices(self) -> int:
        return self._lost

    @property
    def busy_ns(self) -> int:
        """Link time spent moving bytes (the true busy time, for checking the meters)."""
        return self._busy_ns

    def rate_at(self, now_ns: int) -> float:
        """The link rate in bytes/ns at ``now_ns``."""
        return self._rate_at(now_ns)

    # ---------------------------------------------------------------- internals

    def _advance(self, now_ns: int) -> None:
        if type(now_ns) is not int or now_ns < self._last_now:
            raise InvalidArgument(f"now_ns must be an int >= {self._last_now}, got {now_ns!r}")
        self._last_now = now_ns

    def _rate_at(self, t_ns: int) -> float:
        index = bisect.bisect_right(self._change_at, t_ns)
        return self._spec.bytes_per_ns if index == 0 else self._spec.rate_changes[index - 1][1]

    def _visible(self, finish_ns: int) -> int:
        batch = self._spec.completion_batch_ns
        return finish_ns if batch == 0 else -(-finish_ns // batch) * batch

    def _push(self, visible: int, completion: SliceCompletion) -> None:
        entry = (visible, self._posted, completion)
        if not self._done or visible >= self._done[-1][0]:
            self._done.append(entry)
        else:  # a failover completion can become visible before later link completions
            bisect.insort(self._done, entry, lo=self._done_head, key=lambda e: (e[0], e[1]))
