"""The sender's verbs rail: a :class:`VerbsDevice` behind the Device protocol, plus the QP
exchange over the control connection and the in-band write notices (:mod:`._verbs_notice`).

Every WRITE slice is posted as two WRs in one chain: the 64-byte notice into the session's
notice ring, then the data as WRITE_WITH_IMM carrying the write id. The budget the dispatch core
sees is half the device's, and the notice's completion is not reported (the data's is; if the
notice fails, RC moves the QP to ERR and the data is flushed, so it reports that).

Staged writes are refused on this rail (``PostRefused(ready=True)``: the core fails them):
staging needs receiver code between landing and the target, which a one-sided write has not.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from tent_credit import CreditResource

from ..devices import Opcode, SliceCompletion, SliceRequest, SliceStatus
from ..devices.tcp import RailStatistics, checksum
from ..errors import InvalidEntry, PostRefused
from ..verbs import (
    VerbsBackend,
    VerbsDevice,
    VerbsDeviceConfig,
    VerbsEndpoint,
    VerbsMessageError,
    VerbsRegion,
    decode_verbs_message,
    encode_verbs_message,
)
from ._verbs_notice import NOTICE, NOTICE_SEGMENT, Notice, slot_amount

__all__ = ["VerbsRail"]

_R = CreditResource
_NOTICE_WR = 1 << 62  # notice wr_ids live above every wr_id the dispatch core chooses


@attrs.define
class _Link:
    session: int
    ring: VerbsRegion | None = None
    sequence: int = 0
    remote: asyncio.Future[VerbsEndpoint] | None = None


class VerbsRail:
    """One verbs rail of a sending engine (Device protocol + ``attach``/``detach``)."""

    def __init__(
        self, backend: VerbsBackend, config: VerbsDeviceConfig, *, name: str, rail: int
    ) -> None:
        self.device = VerbsDevice(backend, config, name=name)
        self.rail = rail
        self.on_lost: Callable[[int], None] | None = None
        self._links: dict[int, _Link] = {}
        self._qps: set[int] = set()  # peers with a QP on the device (live or retired)
        self._notices: dict[int, bytearray] = {}  # notice wr_id -> its bytes (kept alive)
        self._peer_of: dict[int, tuple[int, Opcode]] = {}  # outstanding slice -> peer, opcode
        self._notice_ids = itertools.count(_NOTICE_WR)
        self._posted = self._completed = self._failed = self._flushed = 0
        self._sent = self._read = 0

    # ------------------------------------------------------------------ Device protocol
    @property
    def name(self) -> str:
        return self.device.name

    @property
    def link_speed_gbps(self) -> float:
        return self.device.link_speed_gbps

    def ready(self, peer: int) -> bool:
        link = self._links.get(peer)
        return link is not None and link.ring is not None and self.device.post_budget(peer) > 0

    def post_budget(self, peer: int) -> int:
        return self.device.post_budget(peer) // 2 if self.ready(peer) else 0

    def post(self, slices: Sequence[SliceRequest], now_ns: int) -> None:
        """Post ``slices`` (one peer) with a notice ahead of every WRITE, in one chain.

        Raises :class:`PostRefused` (nothing posted): ``ready=False`` before the exchange is
        done, ``ready=True`` for a staged write, more than :meth:`post_budget`, or what the
        device refuses (see :meth:`VerbsDevice.post`).
        """
        if not slices:
            raise PostRefused("empty post", ready=True)
        peer = slices[0].peer
        link = self._links.get(peer)
        if link is None or link.ring is None or not self.ready(peer):
            raise PostRefused(f"peer {peer}'s verbs rail is not connected on {self.name}")
        if len(slices) > self.post_budget(peer):
            raise PostRefused(f"{len(slices)} slices exceed the budget", ready=True)
        slots = link.ring.length // NOTICE.size
        chain: list[SliceRequest] = []
        notices: dict[int, bytearray] = {}
        sequence = link.sequence
        for s in slices:
            if s.opcode is Opcode.WRITE:
                record = bytearray(self._notice(s, sequence))
                wr_id = next(self._notice_ids)
                notices[wr_id] = record
                chain.append(
                    SliceRequest(
                        wr_id=wr_id,
                        opcode=Opcode.WRITE,
                        peer=peer,
                        local=memoryview(record),
                        remote_segment=NOTICE_SEGMENT,
                        remote_offset=link.ring.offset + (sequence % slots) * NOTICE.size,
                        length=NOTICE.size,
                        lease=None,
                        write_id=sequence & 0xFFFFFFFF,
                    )
                )
                sequence += 1
            chain.append(s)
        self.device.post(chain, now_ns)  # all or nothing up to a mid-chain provider refusal
        link.sequence = sequence
        self._notices.update(notices)
        self._peer_of.update((s.wr_id, (peer, s.opcode)) for s in slices)
        self._posted += len(slices)

    @staticmethod
    def _notice(s: SliceRequest, sequence: int) -> bytes:
        charge = dict(s.lease.charge) if s.lease is not None else {}
        if charge.get(_R.STAGING_SLOTS, 0):
            raise PostRefused("staged writes need receiver code: not over verbs", ready=True)
        try:
            return Notice(
                write_id=s.write_id,
                sequence=sequence & 0xFFFFFFFF,
                credited=s.lease is not None,
                segment=s.remote_segment,
                offset=s.remote_offset,
                length=s.length,
                data_bytes=charge.get(_R.DATA_BYTES, 0),
                qos_class=0 if s.lease is None else s.lease.qos_class,
                checksum=checksum(s.local),
                request_slots=slot_amount(charge.get(_R.REQUEST_SLOTS, 0)),
                staging_slots=0,
                consumer_slots=slot_amount(charge.get(_R.CONSUMER_SLOTS, 0)),
            ).pack()
        except (ValueError, OverflowError) as exc:
            raise PostRefused(f"slice does not fit a notice: {exc}", ready=True) from exc

    def poll(self, max_entries: int, now_ns: int) -> list[SliceCompletion]:
        """Up to ``max_entries`` data completions (notices' are consumed, not reported)."""
        out: list[SliceCompletion] = []
        while len(out) < max_entries:
            room = max_entries - len(out)
            batch = self.device.poll(room, now_ns)
            out.extend(self._settle(c) for c in batch if self._notices.pop(c.wr_id, None) is None)
            if len(batch) < room:
                break  # the CQ is empty
        return out

    def _settle(self, c: SliceCompletion) -> SliceCompletion:
        peer, opcode = self._peer_of.pop(c.wr_id, (None, Opcode.WRITE))
        if c.status is not SliceStatus.SUCCESS and peer is not None:
            self._failed_qp(peer)
        if c.status is SliceStatus.SUCCESS:
            self._completed += 1
            if opcode is Opcode.READ:
                self._read += c.length
            else:
                self._sent += c.length
        elif c.status is SliceStatus.FLUSHED:
            self._flushed += 1
        else:
            self._failed += 1
        return c

    def _failed_qp(self, peer: int) -> None:
        # RC moved the QP to ERR (a failed WR flushes the rest): under a live session the rail
        # would stay without a QP, so tell the owner, who restarts the session (a new QP),
        # as the TCP rail does for a lost data connection. Once per QP.
        link = self._links.get(peer)
        if link is None or link.ring is None:
            return
        link.ring = None
        if self.on_lost is None:
            return
        try:  # not from inside the dispatch core's poll pass
            asyncio.get_running_loop().call_soon(self.on_lost, peer)
        except RuntimeError:
            self.on_lost(peer)

    def next_completion_ns(self) -> int | None:
        return None

    def set_wakeup(self, callback: Callable[[], None] | None) -> None:
        self.device.set_wakeup(callback)

    def close(self) -> None:
        self.device.close()

    def statistics(self) -> RailStatistics:
        return RailStatistics(
            posted=self._posted,
            completed=self._completed,
            failed=self._failed,
            flushed=self._flushed,
            bytes_sent=self._sent,
            bytes_read=self._read,
            outstanding=self._posted - self._completed - self._failed - self._flushed,
        )

    # ------------------------------------------------------------------ the exchange
    async def attach(
        self, peer: int, session: int, send: Callable[[bytes], bool], timeout_s: float = 5.0
    ) -> None:
        """Exchange endpoints with ``peer``'s receiver for control ``session`` over ``send``
        (VERBS frames) and bring the QP to RTS. A previous QP of the peer is retired and
        forgotten first (its slices flushed). Raises ``TimeoutError``; nothing is attached then.
        """
        await self._forget(peer, timeout_s)
        link = _Link(session=session)
        link.remote = asyncio.get_running_loop().create_future()
        self._links[peer] = link
        local = self.device.endpoint(peer)
        self._qps.add(peer)
        if not send(encode_verbs_message(local)):
            raise TimeoutError("control connection closed during the verbs exchange")
        remote = await asyncio.wait_for(link.remote, timeout_s)
        self.device.connect(peer, remote)

    def detach(self, peer: int) -> None:
        """The control session is gone: move the QP to ERR (outstanding slices flush)."""
        self.device.retire(peer)
        self.device.drop_regions(peer)
        link = self._links.get(peer)
        if link is not None:
            link.ring = None

    async def _forget(self, peer: int, timeout_s: float) -> None:
        self._links.pop(peer, None)
        if peer not in self._qps:
            return
        self.device.retire(peer)
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while True:
            with contextlib.suppress(InvalidEntry):
                self.device.forget(peer)
                self._qps.discard(peer)
                return
            if loop.time() > end:
                raise TimeoutError(f"peer {peer}'s old QP did not drain")
            await asyncio.sleep(0.002)  # the core polls the flushes on its wake-up

    def frame(self, peer: int, payload: bytes) -> bool:
        """A VERBS frame from ``peer``'s receiver; ``False`` = a peer fault (drop the session)."""
        link = self._links.get(peer)
        try:
            message: Any = decode_verbs_message(payload)
        except VerbsMessageError:
            return False
        if link is None:
            return True  # a message of a session being replaced
        if isinstance(message, VerbsEndpoint):
            if link.remote is None or link.remote.done():
                return False
            link.remote.set_result(message)
            return True
        if message.session != link.session:
            return True  # an older session's region: ignored
        if message.segment == NOTICE_SEGMENT:
            if message.length < NOTICE.size or link.ring is not None:
                return False
            self.device.add_region(peer, message)
            link.ring = message
            return True
        try:
            self.device.add_region(peer, message)
        except Exception:  # TooManyRequests / InvalidEntry: the peer overran our tables
            return False
        return True
