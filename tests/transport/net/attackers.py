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

import attrs
from tent_transport.control import (
    CHALLENGE_BYTES,
    FrameDecoder,
    FrameKind,
    PskIdentity,
    data_bind_proof,
)
from tent_transport.devices.tcp import ACK, Ack, Flags, Request, WireOpcode, checksum
from tent_transport.engine import EngineOptions, SyncEngine


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
        self._decoder = FrameDecoder()
        self._frames: list[tuple[FrameKind, bytes]] = []

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

    def frame(self, kind: FrameKind, timeout_s: float = 5.0) -> bytes:
        """The payload of the next control frame of ``kind`` the listener sends after the
        handshake (frames of other kinds are skipped); raises ``TimeoutError``."""
        end = time.monotonic() + timeout_s
        while True:  # bounded by the deadline
            for got, payload in self._frames:
                if got is kind:
                    self._frames.remove((got, payload))
                    return payload
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {kind.name} frame within {timeout_s} s")
            self.sock.settimeout(left)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed by the listener")
            self._frames.extend(self._decoder.feed(chunk))

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


# ------------------------------------------------------------------ a raw data connection


class RawData:
    """A data connection written by hand (``devices/tcp``) on a blocking socket: it reads the
    listener's challenge, answers with a bind of whatever peer, rail and key the caller
    chooses (the listener must check them), then sends headers and payloads the engine's rail
    would never send (outside a region, past credit, of another session, with a wrong CRC32C).
    """

    def __init__(self, port: int, *, timeout_s: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.challenge = _read_exactly(self.sock, CHALLENGE_BYTES)

    def bind(self, key: bytes, peer: int, rail: int = 0) -> None:
        """Send the bind of ``(peer, rail)`` proved with ``key`` (any key: a forged bind)."""
        self.sock.sendall(data_bind_proof(key, self.challenge, peer, rail))

    def answer(self, timeout_s: float) -> Ack | str:
        """The listener's next acknowledgement, or ``"closed"`` (it closed or reset the
        connection without one), or ``"silent"`` (nothing within ``timeout_s``)."""
        self.sock.settimeout(timeout_s)
        out = b""
        try:
            while len(out) < ACK.size:
                chunk = self.sock.recv(ACK.size - len(out))
                if not chunk:
                    return "closed"
                out += chunk
        except TimeoutError:
            return "silent" if not out else "closed"
        except OSError:  # reset
            return "closed"
        ack = Ack.unpack(out)
        return "closed" if ack is None else ack

    def write(self, request: Request, payload: bytes, *, refusal_s: float = 2.0) -> tuple[str, str]:
        """Send ``request``'s header, wait up to ``refusal_s`` for an answer, and only if none
        came send ``payload`` and wait for the answer to it.

        Returns ``(when, what)``: ``when`` is ``"header"`` if the listener answered (or
        closed) before any payload byte was sent, else ``"payload"``; ``what`` is the
        acknowledgement's status name, ``"closed"`` or ``"silent"``. With ``refusal_s`` 0
        the header and the payload go together (``when`` is then ``"payload"``)."""
        try:
            self.sock.sendall(request.pack() + (payload if refusal_s <= 0 else b""))
        except OSError:
            return "header", "closed"
        first = "silent" if refusal_s <= 0 else self.answer(refusal_s)
        if first != "silent":
            return "header", first if isinstance(first, str) else first.status.name
        try:
            if refusal_s > 0:
                self.sock.sendall(payload)
        except OSError:
            return "payload", "closed"
        second = self.answer(max(refusal_s, 5.0))
        return "payload", second if isinstance(second, str) else second.status.name

    def close(self) -> None:
        self.sock.close()


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return out


def write_header(
    *,
    session: int,
    segment: int,
    offset: int,
    payload: bytes,
    lease: tuple[int, int] | None = None,
    charge: tuple[int, int, int, int] = (0, 0, 0, 0),
    write_id: int = 1,
    crc: int | None = None,
    slice_index: int = 0,
    opcode: WireOpcode = WireOpcode.WRITE,
    length: int | None = None,
) -> Request:
    """A data header as the rail writes it, with every field the caller's to lie about:
    ``lease`` is ``(receiver credit session, epoch)`` (``None``: uncredited), ``crc`` the
    payload's CRC32C unless given."""
    return Request(
        opcode=opcode,
        flags=Flags.NONE if lease is None else Flags.CREDITED,
        qos_class=0,
        write_id=write_id,
        request=write_id,
        segment=segment,
        offset=offset,
        length=len(payload) if length is None else length,
        session=session,
        lease_session=0 if lease is None else lease[0],
        epoch=0 if lease is None else lease[1],
        checksum=checksum(payload) if crc is None else crc,
        charge=charge,
        slice_index=slice_index,
    )


# ------------------------------------------------------------------ an authenticated liar


@attrs.frozen(kw_only=True)
class LiarSession:
    """What an authenticated peer knows of its own current session at the receiver."""

    session: int
    data_key: bytes = attrs.field(repr=False)
    lease: tuple[int, int]
    """``(receiver credit session, epoch)`` of its credit key."""
    region: tuple[int, int, int]
    """``(segment, offset, length)`` of the first region exposed to it."""
    granted: dict[int, int]
    """Its available credit per resource (``CreditResource`` value)."""


class Liar:
    """An authenticated peer of its own (its own id and key, not the honest sender's): an
    engine that handshakes, negotiates credit and learns its regions like any sender, and
    whose lies go over raw data connections (:class:`RawData`) bound with its session's data
    key. The engine itself is never made to lie; it holds the session the lies claim."""

    def __init__(self, me: int, *, receiver: int, key: bytes, control_port: int, config: object):
        self.me = me
        self.engine = SyncEngine(
            config,  # type: ignore[arg-type]
            EngineOptions(peer_id=me, identity=PskIdentity(local_peer=me, keys={receiver: key})),
        )
        self.engine.start()
        self.peer = self.engine.connect("127.0.0.1", control_port)

    def session(self, *, credit: bool = True) -> LiarSession | None:
        """Its current session once it is whole (a region, an active credit key, with some
        credit unless ``credit`` is false, the rail's data connection up), else ``None``."""
        engine = self.engine.engine

        def read() -> LiarSession | None:
            link = engine._links[self.peer]
            endpoint, auth = link.endpoint, link.client.auth
            if endpoint is None or endpoint.key is None or auth is None or not link.regions:
                return None
            if not link.regions.regions or not engine.rails[0].ready(self.peer):
                return None
            if link.regions.session != link.session:
                return None
            granted = {int(r): a for r, a in endpoint.available().items()}
            if credit and not any(granted.values()):
                return None
            region = link.regions.regions[0]
            return LiarSession(
                session=link.session,
                data_key=auth.data_key,
                lease=(endpoint.key.receiver_session.value, endpoint.epoch),
                region=(region.segment_id, region.offset, region.length),
                granted=granted,
            )

        return self.engine._call(read)

    def wait_session(
        self, *, not_session: int = 0, credit: bool = True, timeout_s: float = 30.0
    ) -> LiarSession:
        """Wait (bounded) for a whole session other than ``not_session``."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            state = self.session(credit=credit)
            if state is not None and state.session != not_session:
                return state
            time.sleep(0.01)
        raise TimeoutError(f"peer {self.me}: no whole session within {timeout_s} s")

    def bind(self, data_port: int, state: LiarSession) -> RawData:
        """A raw data connection bound to ``state``'s session (one more beside the engine's
        own, within ``max_session_connections``)."""
        raw = RawData(data_port)
        raw.bind(state.data_key, self.me)
        return raw

    def close(self) -> None:
        self.engine.close()
