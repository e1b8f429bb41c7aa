"""The receivers' accept loop (control/_listener.py): while the door is full, accepts are paced
by a token bucket and the rest wait in the kernel's queue (every connect() still completes);
with room, nothing is paced; closing while paused stops it; pressure is a full door or a burst of
failed handshakes. On real loopback sockets, on
asyncio's loop and on uvloop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from raw_helpers import run
from tent_transport.control._door import Door
from tent_transport.control._listener import AcceptPacer, PacedListener, Pressure

__all__ = ["run"]  # the fixture (raw_helpers)


class Counting(asyncio.Protocol):
    made: list[Counting]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        Counting.made.append(self)


async def _listener(full: Callable[[], bool], rate: float, burst: int) -> PacedListener:
    Counting.made = []
    return await PacedListener.listen(
        Counting, "127.0.0.1", 0, full=full, rate=rate, burst=burst, backlog=64
    )


async def _connect(address: tuple[str, int], count: int) -> list[socket.socket]:
    loop = asyncio.get_running_loop()
    clients = []
    for _ in range(count):
        client = socket.socket()
        client.setblocking(False)
        await loop.sock_connect(client, address)  # completes once the kernel queued it
        clients.append(client)
    return clients


async def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "not reached in time"
        await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def _serving(
    full: Callable[[], bool], *, rate: float, burst: int, clients: int
) -> AsyncIterator[PacedListener]:
    """A listener and ``clients`` connections to it (every ``connect()`` completes, taken or
    queued), all closed on the way out."""
    listener = await _listener(full, rate=rate, burst=burst)
    sockets = await _connect(listener.address(), clients)
    try:
        yield listener
    finally:
        listener.close()
        await listener.wait_closed()
        for client in sockets:
            client.close()


def test_a_full_door_takes_only_its_burst_and_the_rest_wait_queued(run: Any) -> None:
    async def main() -> None:
        # no refill within a test: rate 1e-6
        async with _serving(lambda: True, rate=1e-6, burst=3, clients=8) as listener:
            await _until(lambda: listener.paced >= 1)
            await asyncio.sleep(0.05)  # what else the loop would take, it could take now
            assert len(Counting.made) == 3

    run(main())


def test_with_room_at_the_door_nothing_is_paced(run: Any) -> None:
    async def main() -> None:
        async with _serving(lambda: False, rate=1e-6, burst=1, clients=40) as listener:
            await _until(lambda: len(Counting.made) == 40)
            assert listener.paced == 0

    run(main())


def test_the_queued_are_taken_once_the_door_has_room_again(run: Any) -> None:
    async def main() -> None:
        door = {"full": True}
        async with _serving(lambda: door["full"], rate=50.0, burst=1, clients=6) as listener:
            await _until(lambda: listener.paced >= 1)
            door["full"] = False  # the next token resumes reading; then no more pacing
            await _until(lambda: len(Counting.made) == 6)

    run(main())


def test_closing_while_paused_stops_accepting_and_frees_the_port(run: Any) -> None:
    async def main() -> None:
        listener = await _listener(lambda: True, rate=1e-6, burst=1)
        address = listener.address()
        clients = await _connect(address, 3)
        await _until(lambda: listener.paced >= 1)
        listener.close()
        listener.close()  # idempotent
        await listener.wait_closed()
        for client in clients:
            client.close()
        with socket.create_server(address):  # the port is free again
            pass
        assert len(Counting.made) == 1

    run(main())


def test_a_port_in_use_is_refused_as_bind_refuses_it(run: Any) -> None:
    async def main() -> None:
        with socket.create_server(("127.0.0.1", 0)) as taken:
            port = taken.getsockname()[1]
            with pytest.raises(OSError):
                await PacedListener.listen(
                    Counting, "127.0.0.1", port, full=lambda: False, rate=1.0, burst=1, backlog=8
                )

    run(main())


def test_the_pacer_gives_its_burst_then_one_token_per_interval() -> None:
    pacer = AcceptPacer(rate=100.0, burst=2, now=0.0)
    for _ in range(2):
        assert pacer.wait(0.0) == 0.0
        pacer.take()
    assert pacer.wait(0.0) == pytest.approx(0.01)  # empty: one token is 10 ms away
    assert pacer.wait(0.0) == pytest.approx(0.01)  # asking spends nothing
    assert pacer.wait(0.005) == pytest.approx(0.005)
    assert pacer.wait(0.01) == 0.0
    pacer.take()
    assert pacer.wait(10.0) == 0.0  # refilled to its burst, not beyond
    pacer.take()
    pacer.take()
    assert pacer.wait(10.0) > 0.0


@pytest.mark.parametrize(("rate", "burst"), [(0, 1), (-1.0, 1), ("1", 1), (1.0, 0), (1.0, 1.5)])
def test_a_bad_rate_or_burst_is_refused(rate: Any, burst: Any) -> None:
    with pytest.raises(ValueError):
        AcceptPacer(rate, burst, 0.0)


def test_pressure_is_a_full_door_or_as_many_failures_as_places_within_the_window() -> None:
    clock = {"now": 100.0}
    door: Door[int] = Door(2, lambda conn: None)
    pressure = Pressure(door, window_s=1.0, clock=lambda: clock["now"])
    assert not pressure()
    door.enter(1)
    door.enter(2)
    assert pressure()  # full
    door.leave(1)
    door.leave(2)
    pressure.failed()
    assert not pressure()  # one failure, two places
    clock["now"] += 0.5
    pressure.failed()
    assert pressure()  # two failures within the second
    clock["now"] += 0.6
    assert not pressure()  # the older one left the window
