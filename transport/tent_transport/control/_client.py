"""The sender's control connection to one receiver (see ``_service`` for the lifecycle)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Protocol

from tent_credit import (
    SUPPORTED_VERSIONS,
    CapabilityActivation,
    NegotiationState,
    SenderEndpoint,
    SessionId,
    encode,
)
from tent_credit.errors import LocalProtocolError

from ._bootstrap import BootstrapError, SessionBootstrap
from ._common import (
    FaultFactory,
    Identity,
    ServiceStatistics,
    _count_violations,
    _Counters,
    _open_stream,
    _Timer,
)
from ._connection import ControlConnection
from ._errors import ConnectionLost, HandshakeFailed
from ._frames import FrameKind
from ._handshake import AuthenticatedPeer, client_handshake
from ._repeats import RepeatHold

__all__ = ["ControlClient", "SenderHooks"]


def _no_credit_activation(endpoint: SenderEndpoint) -> bytes:
    versions = tuple(v for v in (0xFFFF,) if v not in SUPPORTED_VERSIONS) or (0xFFFE,)
    return encode(
        CapabilityActivation(
            versions=versions,
            selected_version=0,
            receiver_session_id=SessionId(1),
            epoch=0,
            qos_class=endpoint.qos_class,
        )
    )


# --------------------------------------------------------------------------- sender side


class SenderHooks(Protocol):
    def session_started(
        self, client: ControlClient, bootstrap: SessionBootstrap, auth: AuthenticatedPeer
    ) -> None:
        """A (re)connected control session is live: open its data connections."""

    def session_lost(self, client: ControlClient) -> None:
        """The control connection dropped (a reconnect follows unless closed)."""

    def descriptors(self, client: ControlClient, payload: bytes) -> None:
        """A DESCRIPTORS frame arrived (decode it; a bad one is a peer fault)."""

    def credit_received(self, client: ControlClient) -> bool:
        """A credit message was applied to the endpoint: stalled work may now be eligible.
        ``True``: a flush of this client follows anyway (the engine's next dispatch pass, which
        flushes every client), so the client leaves what the message queued to it; ``False``:
        the client flushes at once."""


class ControlClient:
    """The sender's control connection to one receiver, with reconnects.

    :meth:`start` makes the first connection and raises :class:`HandshakeFailed` or
    :class:`OSError` if it fails (nothing is left running). Afterwards a lost connection is
    re-established with a bounded exponential back-off until :meth:`close`.

    ``usage_interval_ns`` is the endpoint's usage interval and ``repeat_cap_ns`` the longest
    back-off of a repeated usage report (:class:`~._repeats.RepeatHold`: a report that only
    repeats the last one waits interval, 2 x interval, ... up to the cap).
    """

    def __init__(
        self,
        identity: Identity,
        host: str,
        port: int,
        *,
        endpoint: SenderEndpoint | None,
        hooks: SenderHooks,
        expect_peer: int | None = None,
        faults: FaultFactory | None = None,
        handshake_timeout_s: float = 5.0,
        backoff_s: tuple[float, float] = (0.02, 1.0),
        max_queued: int = 256,
        usage_interval_ns: int = 1_000_000,
        repeat_cap_ns: int = 200_000_000,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._repeats = RepeatHold(usage_interval_ns, max(usage_interval_ns, repeat_cap_ns))
        self._usage_interval = usage_interval_ns
        self._identity = identity
        self.host = host
        self.port = port
        self.endpoint = endpoint
        self._hooks = hooks
        self._expect = expect_peer
        self._faults = faults
        self._timeout = handshake_timeout_s
        self._backoff = backoff_s
        self._max_queued = max_queued
        self._clock = clock
        self._connection: ControlConnection | None = None
        self._auth: AuthenticatedPeer | None = None
        self._bootstrap_pending = False
        self._closed = False
        self._lost = asyncio.Event()
        self._maintainer: asyncio.Task[None] | None = None
        self._timer = _Timer(self._on_timer)
        self._counters = _Counters()
        self.bootstrap: SessionBootstrap | None = None
        self._started_once = False

    @property
    def peer(self) -> int:
        """The receiver's authenticated peer id. Raises :class:`ConnectionLost` before the
        first connection."""
        if self._auth is None:
            raise ConnectionLost("not connected yet")
        return self._auth.peer

    @property
    def auth(self) -> AuthenticatedPeer | None:
        """What the latest handshake proved (``None`` before the first connection)."""
        return self._auth

    @property
    def closing(self) -> bool:
        return self._closed

    @property
    def connected(self) -> bool:
        return self._connection is not None and not self._connection.closed

    def statistics(self) -> ServiceStatistics:
        return self._counters.snapshot()

    @property
    def repeats_held(self) -> int:
        """Usage reports held back because they only repeated the last one published."""
        return self._repeats.held

    async def start(self) -> None:
        await self._connect_once()
        self._maintainer = asyncio.ensure_future(self._maintain())

    async def _connect_once(self) -> None:
        reader, writer = await _open_stream(self.host, self.port, self._identity)
        try:
            auth = await asyncio.wait_for(
                client_handshake(reader, writer, self._identity, expect_peer=self._expect),
                self._timeout,
            )
        except (HandshakeFailed, TimeoutError, ConnectionError, OSError) as exc:
            self._counters.handshakes_failed += 1
            writer.close()
            if isinstance(exc, HandshakeFailed):
                raise
            raise HandshakeFailed(f"handshake did not complete: {exc!r}") from exc
        if self._auth is not None and auth.peer != self._auth.peer:
            writer.close()
            raise HandshakeFailed(f"reconnected to peer {auth.peer}, was {self._auth.peer}")
        self._auth = auth
        self._lost.clear()
        self._bootstrap_pending = True
        self._repeats.reset()
        self._connection = ControlConnection(
            reader,
            writer,
            auth,
            on_frame=self._on_frame,
            on_closed=self._on_closed,
            max_queued=self._max_queued,
            faults=None if self._faults is None else self._faults(auth.peer),
        )
        self._connection.start()

    async def _maintain(self) -> None:
        delay = self._backoff[0]
        while not self._closed:
            await self._lost.wait()
            if self.closing:
                return
            await asyncio.sleep(delay)
            try:
                await self._connect_once()
            except (HandshakeFailed, OSError):
                delay = min(delay * 2, self._backoff[1])
                continue
            delay = self._backoff[0]
            self._counters.reconnects += 1

    def _on_frame(self, kind: FrameKind, payload: bytes) -> None:
        assert self._connection is not None and self._auth is not None
        if self._bootstrap_pending:
            if kind is not FrameKind.SESSION:
                self._violation("the first frame must be the session bootstrap")
                return
            try:
                bootstrap = SessionBootstrap.decode(payload)
            except BootstrapError as exc:
                self._violation(str(exc))
                return
            self._bootstrap_pending = False
            self.bootstrap = bootstrap
            self._session_started(bootstrap, self._auth)
            return
        if kind is FrameKind.CREDIT:
            if self.endpoint is None:
                self._counters.unsupported += 1
                return
            events = self.endpoint.receive_message(payload, self._clock())
            _count_violations(self._counters, events)
            # the engine's pass flushes every client right after: a flush here as well asked
            # the endpoint twice per frame, once for nothing (1.2 frames per block at 16 senders)
            if not self._hooks.credit_received(self):
                self.flush()
        elif kind is FrameKind.DESCRIPTORS:
            self._hooks.descriptors(self, payload)
        elif kind is FrameKind.VERBS and hasattr(self._hooks, "verbs_frame"):
            self._hooks.verbs_frame(self, payload)
        else:
            self._violation(f"unexpected {kind.name} frame")

    def _violation(self, detail: str) -> None:
        self._counters.violations += 1
        if self._connection is not None:
            self._connection.close(f"protocol violation: {detail}")

    def _session_started(self, bootstrap: SessionBootstrap, auth: AuthenticatedPeer) -> None:
        endpoint = self.endpoint
        if endpoint is not None:
            now = self._clock()
            if not self._started_once:
                endpoint.connect(now)
            else:
                # DISABLED / LEGACY / FAILED have nothing to renegotiate
                with contextlib.suppress(LocalProtocolError):
                    endpoint.reconnect(now)
            if not bootstrap.credit_versions and endpoint.state is NegotiationState.NEGOTIATING:
                # An old peer: its bootstrap has no credit capability and it will never
                # answer an offer. Tell the endpoint what such a peer's answer would be, an
                # activation with no common version: OPTIONAL falls back to the bounded legacy
                # window, REQUIRED fails explicitly (the core decides which).
                events = endpoint.receive_message(_no_credit_activation(endpoint), now)
                _count_violations(self._counters, events)
        self._started_once = True
        self._hooks.session_started(self, bootstrap, auth)
        self.flush()

    def _on_closed(self) -> None:
        self._timer.cancel()
        if self.endpoint is not None and self._started_once:
            self.endpoint.disconnect(self._clock())
        self._hooks.session_lost(self)
        self._lost.set()

    def _on_timer(self) -> None:
        if self.endpoint is not None:
            self.endpoint.handle_timer(self._clock())
        self.flush()

    def flush(self) -> None:
        """Send what the endpoint queued; re-arm its timer. Call after every reservation,
        commit or completion (the engine does, once per dispatch pass)."""
        endpoint = self.endpoint
        connection = self._connection
        if endpoint is None or connection is None or connection.closed or self._bootstrap_pending:
            return
        now = self._clock()
        if endpoint.ahead:
            # version 2: the endpoint sends only news and its refresh (tent_credit._levels)
            for message in endpoint.messages_to_send(now):
                connection.publish(FrameKind.CREDIT, message)
            self._timer.arm(endpoint.get_timer(), now)
            return
        for message in endpoint.messages_to_send(now):
            if not self._repeats.admit(message, now):
                continue  # a repeat within its back-off (module _repeats)
            if not connection.publish(FrameKind.CREDIT, message):
                self._repeats.refused()
        self._timer.arm(self._repeats.timer(endpoint.get_timer(), self._usage_interval), now)

    def send_verbs(self, payload: bytes) -> bool:
        """Publish a VERBS frame on the live connection (``False``: none, or its queue is full)."""
        connection = self._connection
        if connection is None or connection.closed:
            return False
        return connection.publish(FrameKind.VERBS, payload)

    def drop_connection(self) -> None:
        """Close the current control connection (tests: a real disconnect; a reconnect follows)."""
        if self._connection is not None:
            self._connection.close("dropped locally")

    async def close(self) -> None:
        self._closed = True
        self._timer.cancel()
        self._lost.set()
        if self._connection is not None:
            self._connection.close("client closing")
        if self._maintainer is not None:
            self._maintainer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintainer
