"""Two network namespaces joined by a veth pair: the ``netns`` network of an incast run.

The receiver process runs in one namespace (``rx``), the senders in the other (``tx``), each
with its own address on the veth link, so the run's TCP crosses a real (virtual) link with its
own device queues instead of loopback. :func:`netns_pair` makes the pair and always removes
it (deleting a namespace removes its end of the veth, and with it the whole pair);
:func:`enter_netns` moves a freshly spawned worker process into one of them.

Needs root and iproute2's ``ip netns`` (Linux). Every ``ip`` call is bounded in time.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator

import attrs

from ..errors import TransportError

__all__ = [
    "NetnsError",
    "NetnsPair",
    "NetnsUnavailable",
    "check_available",
    "enter_netns",
    "list_namespaces",
    "netns_pair",
]

PREFIX = "tent-incast-"
_CLONE_NEWNET = 0x40000000
_IP_TIMEOUT_S = 20.0
_counter = itertools.count()


class NetnsError(TransportError):
    """An ``ip`` call that sets up or enters the namespaces failed (or timed out). Whatever
    the setup had made is removed before this is raised."""


class NetnsUnavailable(NetnsError):
    """This machine cannot make network namespaces: not root, no ``ip``, or ``ip netns``
    refused. Nothing was made."""


@attrs.frozen
class NetnsPair:
    """The two namespaces of a run and their addresses on the veth link between them."""

    rx: str
    tx: str
    rx_address: str
    tx_address: str


def _ip(*args: str) -> str:
    """Run ``ip args``; its stdout. Raises NetnsError on a non-zero exit or a timeout."""
    try:
        done = subprocess.run(
            ["ip", *args], capture_output=True, text=True, timeout=_IP_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise NetnsError(f"ip {' '.join(args)}: no answer in {_IP_TIMEOUT_S:.0f} s") from None
    except OSError as exc:
        raise NetnsUnavailable(f"cannot run ip: {exc}") from None
    if done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def check_available() -> None:
    """Raise NetnsUnavailable unless this process can make network namespaces (root, Linux,
    iproute2's ``ip`` on PATH and ``ip netns list`` answering). Makes nothing."""
    if not hasattr(os, "geteuid") or not os.path.isdir("/proc/self/ns"):
        raise NetnsUnavailable("network namespaces need Linux")
    if os.geteuid() != 0:
        raise NetnsUnavailable("the netns network needs root (ip netns add, veth links)")
    if shutil.which("ip") is None:
        raise NetnsUnavailable("the netns network needs iproute2's ip command on PATH")
    try:
        _ip("netns", "list")
    except NetnsError as exc:
        raise NetnsUnavailable(f"ip netns is unavailable: {exc}") from None


def list_namespaces() -> list[str]:
    """The names ``ip netns list`` shows (an id suffix such as ``(id: 3)`` dropped)."""
    return [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale() -> None:
    """Delete the namespaces of incast runs whose process is gone (a runner killed by
    SIGKILL cannot run its teardown); a live process's namespaces are left alone."""
    pattern = re.compile(rf"^{re.escape(PREFIX)}(\d+)-\d+-(rx|tx)$")
    for name in list_namespaces():
        match = pattern.match(name)
        if match and int(match.group(1)) != os.getpid() and not _alive(int(match.group(1))):
            with contextlib.suppress(NetnsError):
                _ip("netns", "del", name)


@contextlib.contextmanager
def netns_pair() -> Iterator[NetnsPair]:
    """Make ``tent-incast-<pid>-<n>-rx`` and ``-tx``, a veth pair between them with
    ``10.231.<n>.1/24`` (rx) and ``.2/24`` (tx), every link up (``lo`` too); remove both
    namespaces on exit, however the body ends.

    Raises NetnsUnavailable (nothing made) or NetnsError (what was made is removed)."""
    check_available()
    _remove_stale()
    n = next(_counter)
    pid = os.getpid()
    base = f"{PREFIX}{pid}-{n}"
    pair = NetnsPair(
        rx=f"{base}-rx",
        tx=f"{base}-tx",
        rx_address=f"10.231.{n % 256}.1",
        tx_address=f"10.231.{n % 256}.2",
    )
    # interface names are at most 15 bytes; they live only inside the two namespaces
    tag = f"{pid % 100000}{n % 100}"
    rx_dev, tx_dev = f"tir{tag}", f"tit{tag}"
    made: list[str] = []
    try:
        for name in (pair.rx, pair.tx):
            _ip("netns", "add", name)
            made.append(name)
        # made inside the namespaces at once: the pair never exists in this namespace
        veth = f"link add {rx_dev} netns {pair.rx} type veth peer name {tx_dev} netns {pair.tx}"
        _ip(*veth.split())
        ends = ((pair.rx, rx_dev, pair.rx_address), (pair.tx, tx_dev, pair.tx_address))
        for name, dev, address in ends:
            _ip("-n", name, "addr", "add", f"{address}/24", "dev", dev)
            _ip("-n", name, "link", "set", dev, "up")
            _ip("-n", name, "link", "set", "lo", "up")
        yield pair
    finally:
        for name in made:
            with contextlib.suppress(NetnsError):
                _ip("netns", "del", name)


def enter_netns(name: str) -> None:
    """Move the calling thread into network namespace ``name`` (``setns(CLONE_NEWNET)``;
    Python 3.11 has no ``os.setns``). Call it first thing in a spawned worker, before any
    thread starts: threads made later inherit it, sockets opened earlier stay where they are.

    Raises NetnsError (the process is still in its old namespace)."""
    try:
        fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    except OSError as exc:
        raise NetnsError(f"no network namespace {name!r}: {exc}") from None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise NetnsError(f"setns({name!r}): {os.strerror(errno)}")
    finally:
        os.close(fd)
