"""The device factory: which Device each rail of an engine is, and its receiver half.

``tcp``: a :class:`TcpRail` per rail and a :class:`TcpDataServer` listening per rail.
``softverbs`` / ``verbs``: one :class:`VerbsRail` (sender) and one :class:`VerbsReceiver`
(receiver), each with its own verbs context, so an engine can send to and receive from the
same peer without their QPs meeting; no data listener (the exchange rides the control
connection).
"""

from __future__ import annotations

import ssl

import attrs

from tent_credit import CreditReceiver

from ..devices.tcp import TcpDataServer, TcpRail
from ..segments import SegmentTable
from ..verbs import VerbsBackend, VerbsDeviceConfig, load_pyverbs, soft_backend
from ._options import EngineOptions
from ._receiving import ReceiverSide
from ._verbs_rail import VerbsRail
from ._verbs_receiver import VerbsReceiver

__all__ = ["Transport", "build_transport"]


@attrs.define
class Transport:
    rails: list[TcpRail | VerbsRail]
    data_servers: list[TcpDataServer]
    verbs: VerbsReceiver | None


def _backend(options: EngineOptions) -> tuple[VerbsBackend, str]:
    if options.device == "softverbs":
        return soft_backend(), "soft0"
    return load_pyverbs(), options.verbs_device


def build_transport(
    options: EngineOptions,
    *,
    data_ssl: tuple[ssl.SSLContext | None, ssl.SSLContext | None],
    receiver: ReceiverSide,
    segments: SegmentTable,
    credit: CreditReceiver | None,
    slice_bytes: int = 4 << 20,
) -> Transport:
    """The rails and receiver halves ``options.device`` names (a TCP data connection's send
    buffer holds one dispatch slice of ``slice_bytes``). Raises the backend's
    ``PyverbsRDMAError`` (no such device) or ``ImportError`` (no pyverbs) for verbs."""
    speeds = options.link_speed_gbps or (0.0,) * len(options.rail_addresses)
    if options.device == "tcp":
        rails: list[TcpRail | VerbsRail] = [
            TcpRail(
                f"tcp{i}",
                rail=i,
                link_speed_gbps=speed,
                ssl_context=data_ssl[1],
                send_buffer_bytes=slice_bytes,
            )
            for i, speed in enumerate(speeds)
        ]
        servers = [
            TcpDataServer(rail=i, segments=segments, plane=receiver, ssl_context=data_ssl[0])
            for i in range(len(options.rail_addresses))
        ]
        return Transport(rails=rails, data_servers=servers, verbs=None)
    backend, name = _backend(options)
    config = VerbsDeviceConfig(device_name=name, link_speed_gbps=speeds[0])
    rail = VerbsRail(backend, config, name=f"{options.device}0", rail=0)
    try:
        rx = VerbsReceiver(
            backend,
            config,
            name=f"{options.device}0-rx",
            receiver=receiver,
            segments=segments,
            credit=credit,
        )
    except BaseException:
        rail.close()
        raise
    return Transport(rails=[rail], data_servers=[], verbs=rx)
