"""An in-memory fake Device: the test decides when and how each posted slice completes."""

from __future__ import annotations

import mmap
from collections.abc import Callable, Sequence

from tent_transport.devices import SliceCompletion, SliceRequest, SliceStatus
from tent_transport.devices.tcp import Flags, Request, WireOpcode
from tent_transport.errors import PostRefused


def lazy_buffer(size: int) -> memoryview:
    """A writable buffer of ``size`` bytes whose pages are only allocated when touched."""
    return memoryview(mmap.mmap(-1, max(size, 1)))[:size]


class FakeDevice:
    """Posts are recorded; ``finish`` moves the oldest outstanding slices to the CQ."""

    def __init__(
        self, name: str = "rail0", *, link_speed_gbps: float = 400.0, max_qp_wr: int = 256
    ) -> None:
        self._name = name
        self._speed = link_speed_gbps
        self.max_qp_wr = max_qp_wr
        self.ready = True
        self.refuse_ready = False  # refuse every post as malformed although ready
        self.posts: list[list[SliceRequest]] = []
        self.outstanding: list[SliceRequest] = []
        self.cq: list[SliceCompletion] = []
        self.polls: list[int] = []
        self.closed = False
        self.wakeup: Callable[[], None] | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def link_speed_gbps(self) -> float:
        return self._speed

    def post_budget(self, peer: int) -> int:
        if not self.ready:
            return 0
        on_qp = sum(1 for s in self.outstanding if s.peer == peer)
        return self.max_qp_wr - on_qp

    def post(self, slices: Sequence[SliceRequest], now_ns: int) -> None:
        if self.refuse_ready:
            raise PostRefused("malformed", ready=True)
        if not self.ready:
            raise PostRefused("QP not ready", ready=False)
        peers = {s.peer for s in slices}
        if len(peers) != 1 or len(slices) > self.post_budget(slices[0].peer):
            raise PostRefused("over budget or several peers", ready=True)
        self.posts.append(list(slices))
        self.outstanding.extend(slices)

    def finish(self, count: int | None = None, status: SliceStatus = SliceStatus.SUCCESS) -> None:
        """Complete the ``count`` oldest outstanding slices (all if None) with ``status``."""
        n = len(self.outstanding) if count is None else count
        done, self.outstanding = self.outstanding[:n], self.outstanding[n:]
        for item in done:
            self.cq.append(SliceCompletion(wr_id=item.wr_id, status=status, length=item.length))

    def poll(self, max_entries: int, now_ns: int) -> list[SliceCompletion]:
        self.polls.append(now_ns)
        out, self.cq = self.cq[:max_entries], self.cq[max_entries:]
        return out

    def next_completion_ns(self) -> int | None:
        return None

    def set_wakeup(self, callback: Callable[[], None] | None) -> None:
        self.wakeup = callback

    def close(self) -> None:
        self.closed = True
        self.finish(status=SliceStatus.FLUSHED)


class CancellableFakeDevice(FakeDevice):
    """A FakeDevice that can cancel posted slices (``Cancellable``); records every call."""

    def __init__(self, name: str = "rail0", **kwargs: object) -> None:
        super().__init__(name, **kwargs)  # type: ignore[arg-type]
        self.cancels: list[list[int]] = []

    def cancel(self, wr_ids: Sequence[int], now_ns: int) -> None:
        self.cancels.append(list(wr_ids))
        targets = set(wr_ids)
        stopped = [s for s in self.outstanding if s.wr_id in targets]
        self.outstanding = [s for s in self.outstanding if s.wr_id not in targets]
        for item in stopped:
            self.cq.append(
                SliceCompletion(wr_id=item.wr_id, status=SliceStatus.CANCELED, length=item.length)
            )


def write_header(
    session: int, epoch: int, length: int, data_bytes: int, *, credited: bool = True
) -> Request:
    """The header of a WRITE of ``length`` bytes at offset 0 of segment 1 on ``session``: leased
    from receiver session 99 at ``epoch`` with ``data_bytes`` and one request and consumer slot
    (``credited``), or uncredited."""
    return Request(
        opcode=WireOpcode.WRITE,
        flags=Flags.CREDITED if credited else Flags.NONE,
        qos_class=0,
        write_id=1,
        request=1,
        segment=1,
        offset=0,
        length=length,
        session=session,
        lease_session=99 if credited else 0,
        epoch=epoch if credited else 0,
        checksum=0,
        charge=(data_bytes, 1, 0, 1) if credited else (0, 0, 0, 0),
    )
