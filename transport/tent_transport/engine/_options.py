"""What an engine needs beyond the seed's JSON: identity, addresses, transport switches."""

from __future__ import annotations

import attrs

from tent_credit._trace import TraceSink

from ..control import PskIdentity, TlsIdentity
from ..control._common import FaultFactory
from ..control._rate import ControlRate
from ..devices import check_transport
from ..devices._congestion import check_congestion

__all__ = ["EngineOptions"]


def _addresses(value: object) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, tuple | list) or not value:
        raise ValueError("rail_addresses must name at least one (host, port)")
    out = []
    for item in value:
        host, port = item
        if type(host) is not str or type(port) is not int or not 0 <= port <= 0xFFFF:
            raise ValueError(f"bad address {item!r}")
        out.append((host, port))
    return tuple(out)


@attrs.frozen(kw_only=True)
class EngineOptions:
    """Transport options of one :class:`Engine`.

    1. ``peer_id`` / ``identity``: this node's id and how it proves it (mutual TLS or PSK).
    2. ``control_address``: where the control listener binds (port 0: any free port).
    3. ``rail_addresses``: one data listener per rail (distinct addresses for distinct links;
       the receiver advertises them in its bootstrap, so they must be reachable by senders).
    4. ``data_tls``: run the data connections under TLS too (needs a :class:`TlsIdentity`).
    5. ``release_on_landing``: release every landed write at once (no consumer; benchmarks).
    6. ``link_speed_gbps``: per rail, seeds the bandwidth series (0 = unknown).
    7. ``peer_dead_after_s``: a peer whose control session stays down this long is declared
       dead: its unposted slices fail (queued transfers keep waiting, visibly stalled).
    8. ``control_faults``: a fault channel per peer for control frames (tests).
    9. ``trace``: a ``tent_credit`` trace sink for the credit endpoints (``tent trace``).
    10. ``metrics_port``: serve the engine's registry over HTTP (``prometheus_client``; 0:
        any free port, see :attr:`Engine.metrics_address`), on ``metrics_address`` (default
        ``127.0.0.1``: the metrics name peers and quarantines, so they reach other hosts only
        when asked to, e.g. ``0.0.0.0`` for a remote scraper). Closed with the engine.
    11. ``credit_session``: this receiver's credit session id (default: minted from the wall
        clock, so a restart gets a larger one; a fixed value is for traces and tests).
    12. ``staging_slots`` / ``staging_slot_bytes``: the receiver's staging pool for staged
        writes (0 slots: no staging; needs receiver credit). The receiver's STAGING_SLOTS
        capacity is capped at the slot count, so credit never promises a slot the pool lacks
        (a staged write to a receiver without a pool then waits, visibly, on STAGING_SLOTS).
        A staged write must fit one slot and one dispatch slice.
    13. ``device``: the data transport of every rail: ``tcp`` (sockets), ``softverbs`` (the
        soft RC device, tests) or ``verbs`` (pyverbs on ``verbs_device``, e.g. ``mlx5_0``).
        Verbs needs exactly one rail; its receiver memory comes from :meth:`Engine.allocate`.
    14. ``max_pending_landed``: data-landed notifications kept for :meth:`Engine.next_landed`
        (default 65,536). Past it, a notification with nothing to release (an uncredited
        write, or one released on landing) is dropped and counted
        (``notifications_dropped``); one whose charge is held is always kept, since its
        release needs it and the receiver's credit capacity bounds how many exist.
    15. ``control_rate``: ``(frames per second, burst, flood seconds)`` each sender's control
        connection may cost the receiver (default 2,000, 4,000, 5 s: about twice an honest
        sender at full speed). Over it the connection is not read for a while; a sender that
        keeps at it for about twice the flood seconds is closed and quarantined
        (docs/abuse.md).
    16. ``data_send_thread``: plaintext TCP data connections send payloads on a thread of
        their own, so the kernel's copy of a payload runs beside the event loop's work instead
        of inside it (docs/transport.md#transport-send-thread); ``False`` sends everything
        from the loop thread; ``None`` (default): a thread only with more than two CPUs.
    17. ``trim_heap``: after a sender's session retires (it closed, was superseded or
        quarantined), give the heap memory its buffers held back to the operating system,
        at most once a second (glibc's ``malloc_trim``; nothing elsewhere). Default on: a
        receiver that outlived a flood or a peer that never read its answers returns to its
        earlier RSS instead of keeping the peak mapped (docs/abuse.md). ``False`` leaves the
        process's allocator alone (an embedding application that manages it itself).
    18. ``data_congestion_control``: the TCP congestion control of the data connections, at
        both ends (e.g. ``"cubic"``; ``None``, the default: the system's). Checked at
        construction: a name this process may not use here is a ``ValueError``
        (docs/transport.md#transport-congestion).
    """

    peer_id: int
    identity: PskIdentity | TlsIdentity
    control_address: tuple[str, int] = ("127.0.0.1", 0)
    rail_addresses: tuple[tuple[str, int], ...] = attrs.field(
        default=(("127.0.0.1", 0),), converter=_addresses
    )
    data_tls: bool = False
    release_on_landing: bool = False
    link_speed_gbps: tuple[float, ...] = ()
    peer_dead_after_s: float = 5.0
    control_faults: FaultFactory | None = None
    trace: TraceSink | None = None
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"
    credit_session: int | None = None
    staging_slots: int = 0
    staging_slot_bytes: int = 4 << 20
    device: str = "tcp"
    verbs_device: str = ""
    max_pending_landed: int = 65_536
    control_rate: tuple[float, int, float] = (2_000.0, 4_000, 5.0)
    data_send_thread: bool | None = None
    trim_heap: bool = True
    data_congestion_control: str | None = None

    def __attrs_post_init__(self) -> None:
        port = self.metrics_port
        if port is not None and (type(port) is not int or not 0 <= port <= 0xFFFF):
            raise ValueError(f"metrics_port must be None or a port number: {port!r}")
        if type(self.metrics_address) is not str or not self.metrics_address:
            raise ValueError(f"metrics_address must be a host: {self.metrics_address!r}")
        if type(self.max_pending_landed) is not int or self.max_pending_landed < 1:
            raise ValueError("max_pending_landed must be an int >= 1")
        rate = self.control_rate
        if not isinstance(rate, tuple) or len(rate) != 3:
            raise ValueError(f"control_rate must be (rate, burst, flood seconds): {rate!r}")
        ControlRate(rate[0], rate[1], flood_s=rate[2])  # raises ValueError when not positive
        if self.identity.local_peer != self.peer_id:
            raise ValueError("identity.local_peer must equal peer_id")
        if self.data_tls and not isinstance(self.identity, TlsIdentity):
            raise ValueError("data_tls needs a TlsIdentity")
        if self.link_speed_gbps and len(self.link_speed_gbps) != len(self.rail_addresses):
            raise ValueError("link_speed_gbps must give one speed per rail")
        if self.data_send_thread is not None and type(self.data_send_thread) is not bool:
            raise ValueError(f"data_send_thread must be a bool or None: {self.data_send_thread!r}")
        if type(self.trim_heap) is not bool:
            raise ValueError(f"trim_heap must be a bool: {self.trim_heap!r}")
        check_congestion(self.data_congestion_control)
        if type(self.device) is not str:
            raise ValueError(f"device must be a transport name: {self.device!r}")
        # the transport refuses what it cannot run (verbs: one rail, no data TLS, a device name)
        check_transport(
            device=self.device,
            rails=len(self.rail_addresses),
            data_tls=self.data_tls,
            device_name=self.verbs_device,
        )
