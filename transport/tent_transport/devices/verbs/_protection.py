"""Receiver protection on verbs: rkeys per (peer, session), invalidated at release and fencing.

A one-sided WRITE runs no receiver code, so the only gate is the memory registration: every
region exposed to a (peer, session) gets an MR of its own (regions may be discontiguous, so one
MR per region), with REMOTE_WRITE (and REMOTE_READ if asked), in that peer's own protection
domain: rkeys are PD-scoped, so another peer that learns or guesses the rkey still cannot use
it through its own QP. Its rkey travels to that peer in a
:class:`VerbsRegion` only when the receiver decides to (under credit). :meth:`Exposures.fence`
deregisters every MR of the session; from that instant the HCA refuses the old session's writes
with ``IBV_WC_REM_ACCESS_ERR`` before they touch memory (RFC: "do not reuse old target resources
until old QPs/inflight work are fenced"). A liar can still write anywhere inside the regions
exposed to it, never outside: its over-claim shows at the completion notice (the write id of
WRITE_WITH_IMM), which the engine checks against the credit core.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import attrs

from ...errors import InvalidArgument, InvalidEntry
from ._backend import VerbsBackend
from ._exchange import VerbsRegion

__all__ = ["Exposures", "WriteArrival", "buffer_address"]


def buffer_address(buffer: memoryview) -> int:
    """The address of a writable, C-contiguous buffer's first byte.

    Raises :class:`InvalidArgument` for a read-only or non-contiguous buffer.
    """
    if buffer.readonly or not buffer.c_contiguous:
        raise InvalidArgument("registered memory must be writable and C-contiguous")
    anchor = ctypes.c_char.from_buffer(buffer)
    address = ctypes.addressof(anchor)
    del anchor  # the caller keeps the buffer alive; the export must not outlive this call
    return address


@attrs.frozen(kw_only=True)
class WriteArrival:
    """A WRITE_WITH_IMM that completed into this rail: from ``peer``, ``length`` bytes."""

    peer: int
    write_id: int
    length: int


class Exposures:
    """The MRs of the regions a receiver exposed, by (peer, session)."""

    def __init__(self, backend: VerbsBackend, pd_of: Callable[[int], Any]) -> None:
        self._b = backend
        self._pd_of = pd_of  # the peer's own PD (raises InvalidEntry for an unknown peer)
        self._by_session: dict[tuple[int, int], list[tuple[VerbsRegion, Any]]] = {}

    def expose(
        self,
        peer: int,
        session: int,
        segment: int,
        buffer: memoryview,
        *,
        offset: int,
        length: int,
        readable: bool = False,
    ) -> VerbsRegion:
        """Register ``buffer[offset : offset + length]`` (``buffer`` is the whole segment) for
        (``peer``, ``session``) and return the :class:`VerbsRegion` to send it.

        The MR lives in the peer's own PD, so its rkey works only through that peer's QP.
        Raises :class:`InvalidArgument` (nothing registered) for a range outside ``buffer`` or a
        read-only buffer, :class:`InvalidEntry` for a peer without a live QP, and the backend's
        ``PyverbsRDMAError`` if the HCA refuses the MR.
        """
        if type(offset) is not int or type(length) is not int or offset < 0 or length < 1:
            raise InvalidArgument(f"bad range offset={offset!r} length={length!r}")
        if offset + length > buffer.nbytes:
            raise InvalidArgument(f"range [{offset}, {offset + length}) outside the segment")
        e = self._b.enums
        access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
        if readable:
            access |= e.IBV_ACCESS_REMOTE_READ
        address = buffer_address(buffer) + offset
        mr = self._b.MR(self._pd_of(peer), length, access, address=address)
        region = VerbsRegion(
            segment=segment,
            session=session,
            offset=offset,
            length=length,
            addr=address,
            rkey=int(mr.rkey),
            readable=readable,
        )
        self._by_session.setdefault((peer, session), []).append((region, mr))
        return region

    def regions(self, peer: int, session: int) -> tuple[VerbsRegion, ...]:
        """The live regions of (``peer``, ``session``)."""
        return tuple(region for region, _ in self._by_session.get((peer, session), ()))

    def release(self, peer: int, region: VerbsRegion) -> None:
        """Deregister one region (its consumer is done): its rkey is invalid at once.

        Raises :class:`InvalidEntry` if it is not live for ``peer``.
        """
        key = (peer, region.session)
        entries = self._by_session.get(key, [])
        for index, (live, mr) in enumerate(entries):
            if live == region:
                mr.close()
                del entries[index]
                if not entries:
                    del self._by_session[key]
                return
        raise InvalidEntry(f"region {region} is not exposed to peer {peer}")

    def fence(self, peer: int, session: int) -> int:
        """Deregister every MR of (``peer``, ``session``); returns how many. When this returns,
        no write under those rkeys can land (the HCA checks the rkey per request)."""
        entries = self._by_session.pop((peer, session), [])
        for _, mr in entries:
            mr.close()
        return len(entries)

    def forget_peer(self, peer: int) -> int:
        """Deregister every session's MRs of ``peer`` (its PD is about to go); returns how many."""
        return sum(self.fence(p, s) for p, s in list(self._by_session) if p == peer)

    def close(self) -> None:
        for entries in self._by_session.values():
            for _, mr in entries:
                mr.close()
        self._by_session.clear()
