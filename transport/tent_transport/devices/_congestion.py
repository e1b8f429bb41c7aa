"""The congestion control of the TCP data connections (``EngineOptions.data_congestion_control``).

A data connection uses the system's default (``net.ipv4.tcp_congestion_control``) unless the
engine names another; both ends set it on their data sockets (the sender's governs writes, the
receiver's READ answers). Where it matters, measured: on a machine whose default is ``bbr``,
loopback data connections saw 700-1,800 retransmitted segments per 800-block incast run, nearly
all spurious (D-SACKed: the original had arrived, reordered), and 10-13 ms stalls of loss
recovery; with ``cubic`` none, and both the fixed window and credit ran faster
(docs/incast.md#incast-congestion). Linux only (``TCP_CONGESTION``); an unprivileged process may
name only what ``net.ipv4.tcp_allowed_congestion_control`` lists.
"""

from __future__ import annotations

import socket

__all__ = ["apply_congestion", "check_congestion", "system_congestion"]

_OPTION = getattr(socket, "TCP_CONGESTION", None)
_NAME_MAX = 15  # TCP_CA_NAME_MAX less its terminating zero


def check_congestion(name: str | None) -> None:
    """Raise :class:`ValueError` unless ``name`` is ``None`` or an algorithm a data socket of
    this process may use here (tried on a socket that never connects)."""
    if name is None:
        return
    if type(name) is not str or not name or len(name) > _NAME_MAX or not name.isascii():
        raise ValueError(f"data_congestion_control must be an algorithm's name: {name!r}")
    if _OPTION is None:
        raise ValueError("data_congestion_control: this platform cannot choose one per socket")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.setsockopt(socket.IPPROTO_TCP, _OPTION, name.encode())
        except OSError as exc:
            raise ValueError(
                f"data_congestion_control {name!r} is not available to this process: {exc}"
            ) from None


def apply_congestion(sock: socket.socket, name: str | None) -> None:
    """Set ``name`` on ``sock`` (``None``: nothing), before it connects or listens: a
    connection sets its algorithm up when it is established, and one changed afterwards keeps
    what the first one set (``bbr`` leaves its pacing on: a loopback stream
    moved 4.4 GB/s so, 9.0-9.4 with ``cubic`` chosen before the connect).
    :func:`check_congestion` vouched for the name; a socket that is closing meanwhile keeps
    what it had."""
    if name is None or _OPTION is None:
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, _OPTION, name.encode())
    except OSError:
        return


def system_congestion() -> str:
    """The system's default TCP congestion control ("": not Linux), what a socket gets when
    nobody names one; benchmark records carry it, since it changes what a TCP run measures
    (docs/incast.md#incast-congestion)."""
    try:
        with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
            return f.read().strip()
    except OSError:
        return ""
