"""``EngineOptions.data_congestion_control`` (devices/_congestion.py): both ends' data sockets
use the algorithm named, the system's when none is; a name this process may not use is refused
when the options are built, before anything listens."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from net_helpers import connect_exposed, write_request
from procs import KEY, credit_config
from tent_transport.config import load_engine_config
from tent_transport.control import PskIdentity
from tent_transport.engine import EngineOptions, SyncEngine

from tent_sched import TaskStatus

_PROC = Path("/proc/sys/net/ipv4")
pytestmark = pytest.mark.skipif(
    not hasattr(socket, "TCP_CONGESTION") or not _PROC.exists(),
    reason="no per-socket TCP congestion control on this platform",
)


def _default() -> str:
    return (_PROC / "tcp_congestion_control").read_text().strip()


def _other() -> str:
    """An algorithm this process may use that is not the system's default (``reno`` is built
    into every Linux kernel; ``cubic`` where the default is reno)."""
    return "cubic" if _default() == "reno" else "reno"


def _algorithm(sock: socket.socket) -> str:
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
    return raw.split(b"\0", 1)[0].decode()


def _options(peer: int, other: int, name: str | None) -> EngineOptions:
    return EngineOptions(
        peer_id=peer,
        identity=PskIdentity(local_peer=peer, keys={other: KEY}),
        data_congestion_control=name,
    )


def _data_sockets(rx: SyncEngine, tx: SyncEngine) -> tuple[socket.socket, socket.socket]:
    (rail,) = tx.engine.rails
    (client,) = rail._peers.values()  # type: ignore[attr-defined]
    (server,) = rx.engine.receivers
    (bound,) = [c for held in server._sessions.values() for c in held]  # type: ignore[attr-defined]
    return (
        client._transport.get_extra_info("socket"),
        bound._transport.get_extra_info("socket"),
    )


@pytest.mark.parametrize("named", [True, False])
def test_both_ends_data_sockets_use_the_algorithm_named_or_the_systems(named: bool) -> None:
    name = _other() if named else None
    config = load_engine_config(credit_config("required", slots=4, block=64 << 10))
    rx = SyncEngine(config, _options(2, 1, name))
    tx = SyncEngine(config, _options(1, 2, name))
    try:
        peer, memory, segment = connect_exposed(rx, tx, 1 << 20)
        data = os.urandom(64 << 10)
        handle = tx.submit_nowait([write_request(peer, segment.segment_id, 0, data)])
        assert handle.result(10).status is TaskStatus.COMPLETED
        assert memory[: len(data)] == data
        want = name if named else _default()
        assert [_algorithm(s) for s in _data_sockets(rx, tx)] == [want, want]
    finally:
        tx.close()
        rx.close()


@pytest.mark.parametrize("bad", ["no-such-algorithm", "", "x" * 16, 3, "cub\u00efc"])
def test_a_name_this_process_may_not_use_is_refused_with_the_options(bad: object) -> None:
    with pytest.raises(ValueError, match="data_congestion_control"):
        _options(1, 2, bad)  # type: ignore[arg-type]
