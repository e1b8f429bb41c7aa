"""Hostile peers for the abuse tests and ``benchmarks/net_abuse.py`` (issue 27).

Each attacker is a thread of plain blocking sockets, on loopback only (the honest peer's own
source address), bounded in connections and in time: it stops at ``max_connections`` opened,
at ``duration_s``, or at :meth:`stop`, whichever comes first.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import selectors
import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator


class SilentFlood(threading.Thread):
    """Keeps ``keep`` connections open to ``port`` that say nothing but ``greeting`` (e.g. a
    well-formed hello, then a stall) and ignore what the listener sends (a data listener's
    challenge, a control listener's proof), and reopens each one the listener closes, as an
    attacker keeps a door full.

    ``opened`` counts connections opened, ``closed_by_peer`` those the listener closed.
    ``duration_s`` counts from the moment the first ``keep`` are open (on a loaded machine
    opening them can take longer than a short window), and if the listener closed none by
    then the flood watches up to ``grace_s`` more for its first close, opening nothing new.
    """

    def __init__(
        self,
        port: int,
        *,
        keep: int,
        max_connections: int = 5_000,
        duration_s: float = 20.0,
        pace_s: float = 0.001,
        greeting: bytes = b"",
        host: str = "127.0.0.1",
        grace_s: float = 2.0,
    ) -> None:
        super().__init__(daemon=True, name=f"silent-flood-{port}")
        self.port = port
        self.host = host
        self.keep = keep
        self.max_connections = max_connections
        self.duration_s = duration_s
        self.pace_s = pace_s
        self.greeting = greeting
        self.grace_s = grace_s
        self.opened = 0
        self.closed_by_peer = 0
        self.full = threading.Event()
        """Set once ``keep`` connections were open at the same time."""
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)

    def _open(self, selector: selectors.BaseSelector) -> bool:
        if self.opened >= self.max_connections:
            return False
        sock = socket.socket()
        try:
            sock.settimeout(2.0)
            sock.connect((self.host, self.port))
            if self.greeting:
                sock.sendall(self.greeting)
        except OSError:
            pass  # refused or reset at once: seen as closed below
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        self.opened += 1
        return True

    def run(self) -> None:
        selector = selectors.DefaultSelector()
        try:
            for _ in range(self.keep):
                if self._halt.is_set():
                    return
                self._open(selector)
            end = time.monotonic() + self.duration_s
            while not self._halt.is_set():
                now = time.monotonic()
                if now >= end + (self.grace_s if self.closed_by_peer == 0 else 0.0):
                    break
                if now < end and len(selector.get_map()) >= self.keep:
                    self.full.set()
                for _closed in self._closed_ones(selector, timeout=0.05):
                    if self._halt.is_set() or time.monotonic() >= end:
                        break  # past the window (only its grace): watch, open nothing
                    time.sleep(self.pace_s)
                    if not self._open(selector):
                        return
        finally:
            list(self._closed_ones(selector, timeout=0))  # count those closed as it stopped
            for key in list(selector.get_map().values()):
                with contextlib.suppress(OSError):
                    key.fileobj.close()  # type: ignore[union-attr]
            selector.close()

    def _closed_ones(
        self, selector: selectors.BaseSelector, *, timeout: float
    ) -> Iterator[socket.socket]:
        """The connections the listener closed among those readable within ``timeout``, each
        counted, unregistered and closed before it is yielded (what they were sent, such as a
        challenge, is read and never answered)."""
        for key, _ in selector.select(timeout=timeout):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                continue
            selector.unregister(sock)
            sock.close()
            self.closed_by_peer += 1
            yield sock


# ------------------------------------------------------------------ a raw control client

_HELLO = struct.Struct("!4sHBQ32s")
_LABEL_CLIENT = b"tent-control-v1 client proof"
_LABEL_SERVER = b"tent-control-v1 server proof"
_LABEL_DATA = b"tent-control-v1 data key"


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def client_proof(key: bytes, hello_c: bytes, hello_s: bytes) -> bytes:
    """The client's proof of ``key`` over one connection's two hellos."""
    return _mac(key, _LABEL_CLIENT, hello_c, hello_s)


class RawControl:
    """The client side of the control handshake on a blocking socket, written from the
    handshake's description (``control/_handshake``) rather than with the library's client,
    so that a test can lie where the honest client never would: claim a peer id and answer
    with a proof made without its key (PSK) or claim one its certificate does not name
    (``tls``: a client context with some certificate), skip the check of the listener's
    proof, or stall.
    """

    def __init__(
        self,
        port: int,
        *,
        claim: int,
        tls: ssl.SSLContext | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        # TLS mode: the hello says so, and the proof fields are fresh secrets (no key)
        self.sock = sock if tls is None else tls.wrap_socket(sock, server_hostname=None)
        self.claim = claim
        self.hello_c = _HELLO.pack(b"TENT", 1, 1 if tls is None else 2, claim, os.urandom(32))
        self.hello_s = b""
        self.server_proof = b""

    def hello(self) -> None:
        """Send our hello and read the listener's hello and proof."""
        self.sock.sendall(self.hello_c)
        self.hello_s = self._read(_HELLO.size)
        self.server_proof = self._read(32)

    def prove(self, key: bytes) -> bytes:
        """Answer with the client proof under ``key`` (any key: the listener must check it);
        returns the data key that proof would derive."""
        self.sock.sendall(client_proof(key, self.hello_c, self.hello_s))
        return _mac(key, _LABEL_DATA, self.hello_c, self.hello_s)

    def server_proof_ok(self, key: bytes) -> bool:
        return hmac.compare_digest(
            self.server_proof, _mac(key, _LABEL_SERVER, self.hello_c, self.hello_s)
        )

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return out

    def closed_by_peer(self, timeout_s: float = 10.0) -> bool:
        """Whether the listener closes the connection within ``timeout_s`` (what it sends
        first, such as the bootstrap, is read and ignored)."""
        self.sock.settimeout(timeout_s)
        end = time.monotonic() + timeout_s
        try:
            while time.monotonic() < end:
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        return False

    def close(self) -> None:
        self.sock.close()
