"""What the engine needs from a transport besides :class:`Device`: the two halves it runs.

A transport gives an engine a **rail** per data path (the sender half: a :class:`Device` the
dispatch core posts to, plus attaching to a peer's receiver for each control session) and one or
more **receiver halves** (listening, landing writes through the shared :class:`DataPlane`
rules, retiring a session's state). The engine drives both through these protocols only, so it
imports no transport (``tests/packaging/test_transport_registry.py`` holds that); a transport is
picked by name through :mod:`tent_transport.devices._registry`.

The rules a write must pass at the receiver (credit admission, landing, release, quarantine)
are not the transport's: they are the :class:`DataPlane` the engine hands every receiver half,
written once (``engine/_receiving.py``). A transport only decodes the write's header
(:class:`~tent_transport.devices.Request`) and asks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import attrs

from ._base import Device
from ._writes import Request

if TYPE_CHECKING:
    from ..control import PeerSession
    from ..segments import Exposure

__all__ = [
    "AttachFailed",
    "AttachRefused",
    "DataPlane",
    "DataServerStatistics",
    "Rail",
    "RailStatistics",
    "ReceiverHalf",
    "SessionContext",
]


class AttachFailed(Exception):
    """A rail could not reach the peer's receiver for this session (a connection or handshake
    failed): the engine fails the session's dispatched work and restarts the session after a
    back-off."""


class AttachRefused(Exception):
    """The peer's receiver can never serve this rail (e.g. a verbs receiver too old to
    acknowledge writes): the engine fails the peer's work with this reason."""


@attrs.frozen(kw_only=True)
class SessionContext:
    """What a rail may use to attach to a peer's receiver for one control session."""

    session: int
    """The receiver's control session (the data path binds to it)."""
    local_peer: int
    address: tuple[str, int]
    """This rail's address at the receiver, as the session's bootstrap advertised it."""
    data_key: bytes
    """The session's key for data binds (HMAC)."""
    send_frame: Callable[[bytes], bool]
    """Send one transport frame to the receiver on the control connection (``False``: the
    connection is gone). Transports that exchange setup in-band (verbs) use it."""


@attrs.frozen(kw_only=True)
class RailStatistics:
    posted: int
    completed: int
    failed: int
    flushed: int
    bytes_sent: int
    bytes_read: int
    outstanding: int


@attrs.frozen(kw_only=True)
class DataServerStatistics:
    """The counters of a receiver half's data path (TCP's listener; a transport without such
    counters reports none, e.g. verbs, whose writes land without receiver code)."""

    connections: int
    binds_refused: int
    binds_evicted: int = 0
    """Unbound connections closed unread to let a newer one wait (``max_unbound`` waited)."""
    writes_landed: int
    writes_refused: int
    integrity_errors: int
    reads_served: int
    bytes_landed: int


class Rail(Device, Protocol):
    """The sender half of a transport: a :class:`Device` that attaches per control session."""

    on_lost: Callable[[int], None] | None
    """Set by the engine: called with the peer when an attached data path failed on its own."""

    async def open_session(self, peer: int, context: SessionContext) -> None:
        """Attach to ``peer``'s receiver for ``context.session`` (replacing an older
        attachment). Raises :class:`AttachFailed` or :class:`AttachRefused`."""
        ...

    def detach(self, peer: int) -> None:
        """The control session is gone: outstanding slices flush."""
        ...

    def frame(self, peer: int, payload: bytes) -> bool:
        """A transport frame from ``peer``'s receiver; ``False``: malformed (the engine drops
        the session). A transport without frames ignores them."""
        ...

    def statistics(self) -> RailStatistics: ...


class ReceiverHalf(Protocol):
    """The receiving half of a transport (loop thread only)."""

    async def listen(self, host: str, port: int) -> tuple[str, int] | None:
        """Listen at the rail's address; ``None``: this transport has no listener (its setup
        rides the control connection, and peers are sent the control address)."""
        ...

    def start(self) -> None:
        """Called once on the running loop, before any session."""
        ...

    async def close(self) -> None: ...

    async def retire(self, peer: int, session: int) -> None:
        """A control session ended: drop its data state; no write of it lands after this."""
        ...

    def take_frame(self, session: PeerSession, payload: bytes) -> bool:
        """A transport frame from a sender; ``False``: this transport takes none."""
        ...

    def expose(self, exposure: Exposure) -> None:
        """A region was exposed to a peer (register it where the transport needs to)."""
        ...

    def revoke(self, exposure: Exposure) -> None: ...

    def allocate(self, length: int) -> memoryview | None:
        """Memory this transport's peers can reach, or ``None``: any buffer will do."""
        ...

    def data_statistics(self) -> DataServerStatistics | None:
        """Its data path's counters (the engine's ``tent_transport_receiver_*`` metrics), or
        ``None``."""
        ...


class DataPlane(Protocol):
    """What the receiving engine decides for its data connections (all in the loop thread)."""

    def bound_session(self, peer: int) -> tuple[int, bytes] | None:
        """``(session, data_key)`` of the peer's live control session, or ``None``."""

    def quarantined(self, peer: int) -> bool: ...

    def admit(self, peer: int, session: int, request: Request) -> str | None:
        """The credit half of write admission: ``None`` = admitted (counted as landed), else
        the refusal reason. Never raises for peer-controlled values."""

    def refused(self, peer: int, session: int, request: Request | None, reason: str) -> None:
        """A peer fault on a data connection: quarantine the sender."""

    def landed(self, peer: int, session: int, request: Request) -> None:
        """A write's bytes landed and verified."""

    def aborted(self, peer: int, session: int, request: Request, reason: str) -> None:
        """An admitted write will never land whole (connection lost, no staging slot)."""

    def integrity_failed(self, peer: int, session: int, request: Request) -> None:
        """An admitted write's payload failed its CRC32C (released like an aborted one; a
        sender that keeps at it is quarantined)."""

    def staging_slot(self, request: Request) -> tuple[int, memoryview] | None:
        """A staging-pool slot for an admitted staged write (``None``: no staging here)."""

    def staged(
        self, peer: int, session: int, request: Request, slot: int, finish: Callable[[bool], None]
    ) -> None:
        """A staged write landed in ``slot`` and verified: move it to its target, then call
        ``finish(ok)`` (which sends its acknowledgement, in order)."""

    def staging_free(self, slot: int) -> None:
        """Give back a slot whose write never landed whole."""
