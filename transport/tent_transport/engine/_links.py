"""The sender side of an engine's peers: one :class:`Link` per connected receiver, its control
sessions and their data attachments.

:class:`SenderLinks` is the :class:`~tent_transport.control.ControlClient` hooks object of every
connection the engine opens: a new control session fails what the old one left unposted and
attaches every rail to the receiver (through the transport's
:meth:`~tent_transport.devices.Rail.open_session`), a lost one detaches the rails and starts
the peer's death timer, and the receiver's descriptors and transport frames land here. The
engine keeps the submit path and asks :meth:`SenderLinks.by_peer` about a peer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from tent_credit import NegotiationState, SenderEndpoint

from ..control import AuthenticatedPeer, ControlClient, SessionBootstrap
from ..devices import AttachFailed, AttachRefused, Rail, SessionContext
from ..dispatch import DispatchCore
from ..segments import DescriptorError, SegmentDescriptors, decode_descriptors
from ._options import EngineOptions

__all__ = ["Link", "SenderLinks"]

_WITHOUT_CREDIT = frozenset({NegotiationState.DISABLED, NegotiationState.LEGACY})


class Link:
    """The sender side of one connected peer."""

    def __init__(self, client: ControlClient, endpoint: SenderEndpoint | None) -> None:
        self.client = client
        self.endpoint = endpoint
        self.peer = -1
        self.session = 0
        self.sessions_started = 0
        self.regions: SegmentDescriptors | None = None
        self.regions_changed = asyncio.Event()
        self.attached = asyncio.Event()
        self.death_timer: asyncio.TimerHandle | None = None
        self.dead = False
        self.refused = ""  # why this session's rails refused the peer (verbs: its schema)
        self.attach_failures = 0  # consecutive sessions whose data connection failed


class SenderLinks:
    """The engine's connected peers (loop thread only)."""

    def __init__(
        self,
        *,
        core: DispatchCore,
        rails: Sequence[Rail],
        options: EngineOptions,
        wake: Callable[[], bool],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        closed: Callable[[], bool],
    ) -> None:
        self.by_peer: dict[int, Link] = {}
        self._core = core
        self._rails = rails
        self._options = options
        self._wake = wake
        self._spawn = spawn
        self._closed = closed

    def of(self, client: ControlClient) -> Link | None:
        for link in self.by_peer.values():
            if link.client is client:
                return link
        return None

    def session_started(
        self, client: ControlClient, bootstrap: SessionBootstrap, auth: AuthenticatedPeer
    ) -> None:
        link = self.of(client)
        if link is None:
            return  # connect() registers the link and starts the session itself
        self.start_session(link, bootstrap, client)

    def start_session(
        self, link: Link, bootstrap: SessionBootstrap, client: ControlClient
    ) -> None:
        auth_key = client.auth.data_key if client.auth is not None else b""
        if link.death_timer is not None:
            link.death_timer.cancel()
            link.death_timer = None
        if link.sessions_started:
            # Unposted slices carry the old session's lease: fail them rather than have the
            # receiver refuse (and quarantine) an honest sender. Without credit, queued work (a
            # fixed window's backlog) too: it names the old session's regions, which the new
            # session has not exposed (yet), and nothing else fences it; refused, the sender
            # is quarantined and can never reconnect, so every later submit would hang.
            # (Credit-gated work is pinned to its snapshot: the new activation fences it.)
            endpoint = link.endpoint
            self._core.fail_peer(
                link.peer,
                time.monotonic_ns(),
                "control session replaced",
                queued=endpoint is None or endpoint.state in _WITHOUT_CREDIT,
            )
            self._wake()  # their handles hear it at the next pass, not at the attach's
        link.sessions_started += 1
        link.session = bootstrap.session
        link.dead = False
        link.refused = ""
        link.attached.clear()
        link.regions = None
        self._spawn(self._attach(link, bootstrap, auth_key))

    async def _attach(self, link: Link, bootstrap: SessionBootstrap, key: bytes) -> None:
        failed = ""
        for rail, address in zip(self._rails, bootstrap.rails, strict=False):
            context = SessionContext(
                session=bootstrap.session,
                local_peer=self._options.peer_id,
                address=address,
                data_key=key,
                send_frame=link.client.send_verbs,
            )
            try:
                await rail.open_session(link.peer, context)
            except AttachRefused as exc:  # a receiver that can never serve this rail
                link.refused = str(exc)
                self._core.fail_peer(link.peer, time.monotonic_ns(), link.refused)
            except AttachFailed as exc:
                failed = failed or str(exc)
        link.attached.set()
        if not failed:
            link.attach_failures = 0
        elif not self._closed() and link.session == bootstrap.session:
            # A session without its data connection could never post a slice, and no lost
            # connection would ever restart it: its work would stay pending forever. Fail what
            # is dispatched (typed) and restart the session, as for a lost data connection,
            # after a back-off (the control reconnect itself succeeds at once).
            self._core.fail_peer(link.peer, time.monotonic_ns(), failed)
            self._wake()
            link.attach_failures += 1
            await asyncio.sleep(min(1.0, 0.02 * 2 ** min(link.attach_failures, 6)))
            if not self._closed() and link.session == bootstrap.session:
                self._core.fail_peer(link.peer, time.monotonic_ns(), failed)
                link.client.drop_connection()
        self._wake()

    def session_lost(self, client: ControlClient) -> None:
        link = self.of(client)
        if link is None or self._closed():
            return
        for rail in self._rails:
            rail.detach(link.peer)
        loop = asyncio.get_running_loop()
        dead_after = self._options.peer_dead_after_s
        link.death_timer = loop.call_later(dead_after, self._declare_dead, link)
        self._wake()

    def data_lost(self, peer: int) -> None:
        # A data connection closed under a live control session: the receiver retired the
        # session or the network failed. Restart the whole session (new data binds, the old
        # session's unposted slices failed) rather than leave the rail without a connection.
        link = self.by_peer.get(peer)
        if link is not None and not self._closed() and link.attached.is_set():
            link.client.drop_connection()

    def _declare_dead(self, link: Link) -> None:
        link.dead = True
        self._core.fail_peer(link.peer, time.monotonic_ns(), "peer unreachable", queued=True)
        self._wake()

    def descriptors(self, client: ControlClient, payload: bytes) -> None:
        link = self.of(client)
        try:
            message = decode_descriptors(payload)
        except DescriptorError:
            client.drop_connection()  # a peer fault on the control path: fail closed
            return
        if link is None or message.session != link.session:
            return
        if link.regions is None or message.generation > link.regions.generation:
            link.regions = message
            link.regions_changed.set()

    def verbs_frame(self, client: ControlClient, payload: bytes) -> None:
        """A VERBS frame from a receiver (endpoint, rkeys); a bad one drops the session."""
        link = self.of(client)
        if link is None:
            return
        for rail in self._rails:
            if not rail.frame(link.peer, payload):
                client.drop_connection()
                return
        self._wake()

    def credit_received(self, client: ControlClient) -> bool:
        # a grant may make a stalled owner eligible: refill now, not at the timer; the pass
        # flushes every linked client (one no longer linked flushes itself)
        scheduled = self._wake()
        return scheduled and self.of(client) is not None

    def regions(self, peer: int) -> SegmentDescriptors | None:
        """The latest descriptors the peer exposed to this engine (``None``: none yet)."""
        link = self.by_peer.get(peer)
        return None if link is None else link.regions

    async def wait_regions(
        self, peer: int, predicate: Callable[[SegmentDescriptors], bool], timeout: float = 10.0
    ) -> SegmentDescriptors:
        """Wait until the peer's descriptors satisfy ``predicate``; raises TimeoutError."""
        link = self.by_peer[peer]

        async def wait() -> SegmentDescriptors:
            while link.regions is None or not predicate(link.regions):
                link.regions_changed.clear()
                await link.regions_changed.wait()
            return link.regions

        return await asyncio.wait_for(wait(), timeout)

    def connected(self, peer: int) -> bool:
        link = self.by_peer.get(peer)
        return link is not None and link.client.connected and not link.dead

    def peers(self) -> tuple[int, ...]:
        return tuple(self.by_peer)
