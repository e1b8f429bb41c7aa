"""The TCP transport as the registry builds it: one :class:`TcpRail` and one listening
:class:`TcpDataServer` per rail address."""

from __future__ import annotations

from .._registry import TransportParts, TransportSpec
from ._receiver import TcpDataServer
from ._sender import TcpRail

__all__ = ["TRANSPORT", "TcpTransport"]


class TcpTransport:
    """Any number of rails, plaintext or TLS (a data connection's send buffer holds one
    dispatch slice)."""

    def check(self, *, device: str, rails: int, data_tls: bool, device_name: str) -> None:
        """Every rail count and either data security runs on TCP: nothing to refuse."""
        return None

    def build(self, spec: TransportSpec) -> TransportParts:
        rails = [
            TcpRail(
                f"tcp{i}",
                rail=i,
                link_speed_gbps=speed,
                ssl_context=spec.data_ssl[1],
                send_buffer_bytes=spec.slice_bytes,
                send_thread=spec.send_thread,
                congestion_control=spec.congestion_control,
            )
            for i, speed in enumerate(spec.link_speed_gbps)
        ]
        servers = [
            TcpDataServer(
                rail=i,
                segments=spec.segments,
                plane=spec.plane,
                ssl_context=spec.data_ssl[0],
                congestion_control=spec.congestion_control,
            )
            for i in range(spec.rails)
        ]
        return TransportParts(rails=rails, receivers=servers)


TRANSPORT = TcpTransport()
