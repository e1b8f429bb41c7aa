"""What the control server and client share: timers, counters, identities."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import attrs

from tent_credit import EndpointEvent
from tent_credit.testing import FaultyChannel

from ._handshake import PskIdentity, TlsIdentity

__all__ = ["FaultFactory", "Identity", "ServiceStatistics"]

Identity = PskIdentity | TlsIdentity
FaultFactory = Callable[[int], FaultyChannel | None]
"""``faults(peer)``: the fault channel for frames sent to ``peer`` (``None``: no faults)."""


class _Timer:
    """One re-armable loop timer at an endpoint's ``get_timer()`` (monotonic ns)."""

    def __init__(self, fire: Callable[[], None]) -> None:
        self._fire = fire
        self._handle: asyncio.TimerHandle | None = None
        self._when_armed = 0  # when the armed handle fires (meaningful while there is one)

    def arm(self, when_ns: int | None, now_ns: int) -> None:
        """Fire at ``when_ns`` (``None``: nothing is due), or earlier.

        A timer already armed for no later than ``when_ns`` is kept: ``fire`` then runs early,
        finds nothing due and arms again (the endpoints' ``handle_timer`` acts only on what is
        due). A sender's deadlines move later at nearly every flush (the idle-credit hold
        restarts with each completion, the staleness deadline with each update): re-arming
        each time cost a cancelled handle and a new one, about two per 4 KiB transfer, where
        keeping the timer costs one early run per hold period."""
        if self._handle is not None and (when_ns is None or self._when_armed <= when_ns):
            return
        self.cancel()
        if when_ns is None:
            return
        self._when_armed = when_ns
        delay = max(0.0, (when_ns - now_ns) / 1e9)
        self._handle = asyncio.get_running_loop().call_later(delay, self._run)

    def _run(self) -> None:
        self._handle = None
        self._fire()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None


@attrs.frozen(kw_only=True)
class ServiceStatistics:
    connections_accepted: int
    handshakes_failed: int
    handshakes_evicted: int
    """Waiting connections closed unread to let a newer one wait: ``max_pending_handshakes``
    were already waiting (``_door``; always 0 at a client)."""
    reconnects: int
    protocol_violations: int
    control_throttled: int
    """Times a peer's control connection was not read because it was over its frame rate."""
    control_floods: int
    """Peers closed (and quarantined) for staying over their control-frame rate."""
    unsupported_frames: int
    fences_completed: int


class _Counters:
    def __init__(self) -> None:
        self.accepted = 0
        self.handshakes_failed = 0
        self.handshakes_evicted = 0
        self.reconnects = 0
        self.violations = 0
        self.unsupported = 0
        self.fences_completed = 0
        self.throttled = 0
        self.floods = 0

    def snapshot(self) -> ServiceStatistics:
        return ServiceStatistics(
            connections_accepted=self.accepted,
            handshakes_failed=self.handshakes_failed,
            handshakes_evicted=self.handshakes_evicted,
            reconnects=self.reconnects,
            protocol_violations=self.violations,
            control_throttled=self.throttled,
            control_floods=self.floods,
            unsupported_frames=self.unsupported,
            fences_completed=self.fences_completed,
        )


def _count_violations(counters: _Counters, events: Sequence[EndpointEvent]) -> None:
    counters.violations += sum(1 for e in events if e.kind == "protocol_violation")


async def _open_stream(
    host: str, port: int, identity: Identity
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if isinstance(identity, TlsIdentity):
        return await asyncio.open_connection(
            host, port, ssl=identity.client_context, server_hostname=None
        )
    return await asyncio.open_connection(host, port)
