"""A transport that moves bytes between two engines of one process, built only from
docs/transport.md, "Adding a transport" (keep the two in step).

The receiver half "listens" by taking an address in a process-wide table; the rail looks its
receiver up by the address the control session advertised, binds with the session's data key,
and hands each write to the receiver, which runs the same rules as every other transport:
the region check, then :meth:`DataPlane.admit`, then the copy and :meth:`DataPlane.landed`
(a refusal goes to :meth:`DataPlane.refused`, which quarantines the sender).

Each engine's state belongs to its own event loop (a ``SyncEngine`` runs one per thread), so a
write runs on the receiver's loop, not in the sender's ``post``: the rail hands it over with
``call_soon_threadsafe`` and the completion comes back through the sender's wake-up, as a real
device's completion does. (Run in the sender's thread, the receiver's landed notification was
set from a foreign thread and woke nobody until some timer of the receiver's loop fired.)
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
from collections.abc import Callable, Sequence

from tent_transport.control import PeerSession
from tent_transport.devices import (
    AttachFailed,
    DataPlane,
    DataServerStatistics,
    Opcode,
    RailStatistics,
    Request,
    SessionContext,
    SliceCompletion,
    SliceRequest,
    SliceStatus,
    TransportParts,
    TransportSpec,
    checksum,
    register_transport,
)
from tent_transport.errors import PostRefused
from tent_transport.segments import Access, Exposure, SegmentTable

_RECEIVERS: dict[tuple[str, int], MemoryReceiver] = {}
_PORTS = itertools.count(1)


class MemoryReceiver:
    """The receiver half: takes an address, runs the shared write rules."""

    def __init__(self, plane: DataPlane, segments: SegmentTable) -> None:
        self.plane = plane
        self.segments = segments
        self.address: tuple[str, int] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._bound: set[tuple[int, int]] = set()  # (peer, session) with a live bind
        self._binds_refused = self._landed = self._refused = self._integrity = self._bytes = 0

    async def listen(self, host: str, port: int) -> tuple[str, int] | None:
        self.loop = asyncio.get_running_loop()  # the receiving engine's: writes run on it
        self.address = ("memory", next(_PORTS))
        _RECEIVERS[self.address] = self
        return self.address

    def start(self) -> None:
        return None

    async def close(self) -> None:
        if self.address is not None:
            _RECEIVERS.pop(self.address, None)
        self._bound.clear()

    async def retire(self, peer: int, session: int) -> None:
        self._bound.discard((peer, session))

    def take_frame(self, session: PeerSession, payload: bytes) -> bool:
        return False

    def expose(self, exposure: Exposure) -> None:
        return None

    def revoke(self, exposure: Exposure) -> None:
        return None

    def allocate(self, length: int) -> memoryview | None:
        return None

    def data_statistics(self) -> DataServerStatistics | None:
        return DataServerStatistics(
            connections=len(self._bound),
            binds_refused=self._binds_refused,
            writes_landed=self._landed,
            writes_refused=self._refused,
            integrity_errors=self._integrity,
            reads_served=0,
            bytes_landed=self._bytes,
        )

    def bind(self, peer: int, session: int, data_key: bytes) -> bool:
        """The data bind: the peer's live control session and its key, not quarantined."""
        bound = self.plane.bound_session(peer)
        if bound != (session, data_key) or self.plane.quarantined(peer):
            self._binds_refused += 1
            return False
        self._bound.add((peer, session))
        return True

    def write_soon(
        self,
        peer: int,
        request: Request,
        payload: memoryview,
        done: Callable[[SliceStatus], None],
    ) -> None:
        """:meth:`write` on this receiver's loop, then ``done(status)`` (any thread may call
        it); a receiver whose loop has closed lands nothing (``FLUSHED``)."""
        try:
            assert self.loop is not None, "listen first"
            self.loop.call_soon_threadsafe(lambda: done(self.write(peer, request, payload)))
        except RuntimeError:  # the receiving engine closed its loop
            done(SliceStatus.FLUSHED)

    def write(self, peer: int, request: Request, payload: memoryview) -> SliceStatus:
        session = request.session
        if (peer, session) not in self._bound:
            return SliceStatus.FLUSHED  # retired: nothing lands
        view = self.segments.check(
            peer,
            session,
            segment_id=request.segment,
            offset=request.offset,
            length=request.length,
            access=Access.WRITE,
        )
        if view is None:
            self._refused += 1
            self.plane.refused(peer, session, request, "outside every region exposed to the peer")
            return SliceStatus.REMOTE_ACCESS_ERROR
        reason = self.plane.admit(peer, session, request)
        if reason is not None:
            self._refused += 1
            self.plane.refused(peer, session, request, reason)
            return SliceStatus.WRITE_REFUSED
        if checksum(payload) != request.checksum:
            self._integrity += 1
            self.plane.integrity_failed(peer, session, request)
            return SliceStatus.INTEGRITY_ERROR
        view[:] = payload
        self._landed += 1
        self._bytes += request.length
        self.plane.landed(peer, session, request)
        return SliceStatus.SUCCESS


class MemoryRail:
    """The sender half: a Device whose posts complete in order, once the receiver's loop ran
    them."""

    def __init__(self, name: str) -> None:
        self._name = name
        self.on_lost: Callable[[int], None] | None = None
        self._peers: dict[int, tuple[MemoryReceiver, int, int]] = {}  # receiver, session, us
        self._done: collections.deque[SliceCompletion] = collections.deque()
        self._wakeup: Callable[[], None] | None = None
        self._posted = self._completed = self._failed = self._sent = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def link_speed_gbps(self) -> float:
        return 0.0

    def post_budget(self, peer: int) -> int:
        return 64 if peer in self._peers else 0

    def post(self, slices: Sequence[SliceRequest], now_ns: int) -> None:
        if not slices:
            return
        peer = slices[0].peer
        if any(s.peer != peer for s in slices) or len(slices) > self.post_budget(peer):
            raise PostRefused("one peer per post, within its budget", ready=peer in self._peers)
        receiver, session, local_peer = self._peers[peer]
        headers = [Request.for_slice(s, session) for s in slices]  # all or nothing
        for s, header in zip(slices, headers, strict=True):
            self._posted += 1
            done = functools.partial(self._done_one, s.wr_id, s.length)
            if s.opcode is Opcode.WRITE:
                receiver.write_soon(local_peer, header, s.local, done)
            else:
                done(SliceStatus.REMOTE_ACCESS_ERROR)  # this sketch serves no READ

    def _done_one(self, wr_id: int, length: int, status: SliceStatus) -> None:
        # on the receiver's loop: a deque append is thread-safe, the wake-up is too (the
        # engine's _wake); the counters are kept by poll, in the sender's thread
        self._done.append(SliceCompletion(wr_id=wr_id, status=status, length=length))
        if self._wakeup is not None:
            self._wakeup()

    def poll(self, max_entries: int, now_ns: int) -> list[SliceCompletion]:
        out: list[SliceCompletion] = []
        while self._done and len(out) < max_entries:
            completion = self._done.popleft()
            ok = completion.status is SliceStatus.SUCCESS
            self._completed += ok
            self._failed += not ok
            self._sent += completion.length if ok else 0
            out.append(completion)
        return out

    def next_completion_ns(self) -> int | None:
        return None

    def set_wakeup(self, callback: Callable[[], None] | None) -> None:
        self._wakeup = callback

    def close(self) -> None:
        self._peers.clear()

    async def open_session(self, peer: int, context: SessionContext) -> None:
        receiver = _RECEIVERS.get(context.address)
        if receiver is None or not receiver.bind(
            context.local_peer, context.session, context.data_key
        ):
            raise AttachFailed(f"{self._name}: no memory receiver bound at {context.address}")
        self._peers[peer] = (receiver, context.session, context.local_peer)

    def detach(self, peer: int) -> None:
        self._peers.pop(peer, None)

    def frame(self, peer: int, payload: bytes) -> bool:
        return True

    def statistics(self) -> RailStatistics:
        return RailStatistics(
            posted=self._posted,
            completed=self._completed,
            failed=self._failed,
            flushed=0,
            bytes_sent=self._sent,
            bytes_read=0,
            outstanding=0,
        )


class MemoryTransport:
    def check(self, *, device: str, rails: int, data_tls: bool, device_name: str) -> None:
        if data_tls:
            raise ValueError("the memory transport has no data TLS (nothing leaves the process)")

    def build(self, spec: TransportSpec) -> TransportParts:
        rails = [MemoryRail(f"memory{i}") for i in range(spec.rails)]
        receivers = [MemoryReceiver(spec.plane, spec.segments) for _ in range(spec.rails)]
        return TransportParts(rails=rails, receivers=receivers, staged_writes=False)


def install() -> None:
    register_transport("memory", MemoryTransport())
