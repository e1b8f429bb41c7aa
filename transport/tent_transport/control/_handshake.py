"""Identity bound at connection setup (docs/transport_design.md#transport-rule-3): mutual TLS or a
pre-shared key.

Everything before authentication is fixed-size binary, never CBOR: a connection that fails the
handshake is closed before any frame of it is decoded, and no length it sent is ever trusted.

Control handshake (the connector is the *client*, the listener the *server*)::

    client -> server   HELLO  magic "TENT" | version u16 | mode u8 | peer u64 | nonce[32]
    server -> client   HELLO  (same layout) | PROOF[32]
    client -> server   PROOF[32]

* **PSK**: each side holds one key per remote peer id. ``PROOF = HMAC-SHA256(key, label(role)
  || hello_c || hello_s)``; the role label stops a reflected proof. The server looks the key up
  by the client's claimed id (unknown id: closed), so a proof shows possession of *that* peer's
  key. ``data_key = HMAC(key, "data" || hello_c || hello_s)``.
* **TLS**: the TLS handshake authenticated both certificates (``CERT_REQUIRED`` both ways); the
  claimed peer id must be one whose configured name appears in the peer certificate's
  subjectAltName. The PROOF fields are fresh random secrets (confidential under TLS), and
  ``data_key = HMAC(secret_s || secret_c, "data" || hello_c || hello_s)``.

Data connections are bound to an authenticated control session (:func:`data_bind_proof`): the
data listener sends a fresh 32-byte challenge, the connector answers ``magic "TDAT" | peer u64
| rail u16 | HMAC(data_key, "bind" || challenge || peer || rail)``, and the listener checks it
against that peer's live control session before it parses a single header.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import hmac
import os
import ssl
import struct
from collections.abc import Callable, Mapping

import attrs

from ._errors import HandshakeFailed

__all__ = [
    "BIND",
    "CHALLENGE_BYTES",
    "HELLO_BYTES",
    "PROOF_BYTES",
    "AuthenticatedPeer",
    "HandshakeMode",
    "PskIdentity",
    "PskServerSteps",
    "TlsIdentity",
    "client_handshake",
    "data_bind_proof",
    "parse_bind",
    "server_handshake",
]

VERSION = 1
_MAGIC = b"TENT"
_HELLO = struct.Struct("!4sHBQ32s")
_PROOF_BYTES = 32
CHALLENGE_BYTES = 32
HELLO_BYTES = _HELLO.size
"""The client's hello, what :meth:`PskServerSteps.hello` takes."""
PROOF_BYTES = _PROOF_BYTES
"""The client's proof, what :meth:`PskServerSteps.proof` takes."""
BIND = struct.Struct("!4sQH32s")
_BIND_MAGIC = b"TDAT"
_LABEL_CLIENT = b"tent-control-v1 client proof"
_LABEL_SERVER = b"tent-control-v1 server proof"
_LABEL_DATA = b"tent-control-v1 data key"
_LABEL_BIND = b"tent-data-v1 bind"
_U64_MAX = 2**64 - 1


class HandshakeMode(enum.IntEnum):
    PSK = 1
    TLS = 2


def _check_peer(value: object, what: str) -> int:
    if type(value) is not int or not 0 <= value <= _U64_MAX:
        raise ValueError(f"{what} must be a u64 peer id, got {value!r}")
    return value


def _keys(value: Mapping[int, bytes]) -> Mapping[int, bytes]:
    out: dict[int, bytes] = {}
    for peer, key in value.items():
        _check_peer(peer, "key peer id")
        if not isinstance(key, bytes) or len(key) < 16:
            raise ValueError(f"the key of peer {peer} must be at least 16 bytes")
        out[peer] = key
    return out


@attrs.frozen(kw_only=True)
class PskIdentity:
    """Pre-shared keys: ``keys[peer]`` is the key this node shares with ``peer``.

    Raises :class:`ValueError` for a non-u64 id or a key shorter than 16 bytes.
    """

    local_peer: int = attrs.field(validator=lambda _i, _a, v: _check_peer(v, "local_peer"))
    keys: Mapping[int, bytes] = attrs.field(converter=_keys)

    @property
    def mode(self) -> HandshakeMode:
        return HandshakeMode.PSK


@attrs.frozen(kw_only=True)
class TlsIdentity:
    """Mutual TLS: ``server_context`` / ``client_context`` must require and verify the peer's
    certificate; ``peer_names[peer]`` is the subjectAltName a certificate must carry to speak as
    ``peer``. Raises :class:`ValueError` if a context does not require a certificate."""

    local_peer: int = attrs.field(validator=lambda _i, _a, v: _check_peer(v, "local_peer"))
    server_context: ssl.SSLContext
    client_context: ssl.SSLContext
    peer_names: Mapping[int, str]

    def __attrs_post_init__(self) -> None:
        for what, ctx in (("server", self.server_context), ("client", self.client_context)):
            if ctx.verify_mode is not ssl.CERT_REQUIRED:
                raise ValueError(f"the {what} context must verify the peer (CERT_REQUIRED)")

    @property
    def mode(self) -> HandshakeMode:
        return HandshakeMode.TLS


Identity = PskIdentity | TlsIdentity


@attrs.frozen(kw_only=True)
class AuthenticatedPeer:
    """What a completed handshake proved: the remote peer id and the key binding data
    connections to this control session."""

    peer: int
    data_key: bytes = attrs.field(repr=False)


def _hello(identity: Identity, nonce: bytes) -> bytes:
    return _HELLO.pack(_MAGIC, VERSION, int(identity.mode), identity.local_peer, nonce)


def _parse_hello(raw: bytes, identity: Identity) -> int:
    magic, version, mode, peer, _nonce = _HELLO.unpack(raw)
    if magic != _MAGIC:
        raise HandshakeFailed("not a TENT control connection")
    if version != VERSION:
        raise HandshakeFailed(f"unsupported handshake version {version}")
    if mode != int(identity.mode):
        raise HandshakeFailed(f"peer uses handshake mode {mode}, we use {identity.mode.name}")
    return int(peer)


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def _tls_names(writer: asyncio.StreamWriter) -> set[str]:
    cert = writer.get_extra_info("peercert")
    if not cert:
        raise HandshakeFailed("no verified peer certificate")
    return {value for kind, value in cert.get("subjectAltName", ()) if kind == "DNS"}


def _check_tls_peer(identity: TlsIdentity, writer: asyncio.StreamWriter, peer: int) -> None:
    name = identity.peer_names.get(peer)
    if name is None or name not in _tls_names(writer):
        raise HandshakeFailed(f"the peer certificate does not name peer {peer}")


async def _read(reader: asyncio.StreamReader, n: int) -> bytes:
    try:
        return await reader.readexactly(n)
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        raise HandshakeFailed(f"connection closed during the handshake: {exc}") from exc


async def client_handshake(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    identity: Identity,
    *,
    expect_peer: int | None = None,
) -> AuthenticatedPeer:
    """Run the client side. Raises :class:`HandshakeFailed` (the caller closes the connection);
    nothing is decoded beyond the fixed-size fields."""
    hello_c = _hello(identity, os.urandom(32))
    writer.write(hello_c)
    await writer.drain()
    hello_s = await _read(reader, _HELLO.size)
    peer = _parse_hello(hello_s, identity)
    if expect_peer is not None and peer != expect_peer:
        raise HandshakeFailed(f"connected to peer {peer}, expected {expect_peer}")
    proof_s = await _read(reader, _PROOF_BYTES)
    if isinstance(identity, PskIdentity):
        key = identity.keys.get(peer)
        if key is None:
            raise HandshakeFailed(f"no key for peer {peer}")
        if not hmac.compare_digest(proof_s, _mac(key, _LABEL_SERVER, hello_c, hello_s)):
            raise HandshakeFailed(f"peer {peer} failed to prove its key")
        writer.write(_mac(key, _LABEL_CLIENT, hello_c, hello_s))
        data_key = _mac(key, _LABEL_DATA, hello_c, hello_s)
    else:
        _check_tls_peer(identity, writer, peer)
        secret_c = os.urandom(_PROOF_BYTES)
        writer.write(secret_c)
        data_key = _mac(proof_s + secret_c, _LABEL_DATA, hello_c, hello_s)
    await writer.drain()
    return AuthenticatedPeer(peer=peer, data_key=data_key)


class PskServerSteps:
    """The server side of the PSK handshake without I/O: feed it the client's hello
    (:data:`HELLO_BYTES`), send the reply it returns, feed it the client's proof
    (:data:`PROOF_BYTES`). :func:`server_handshake` drives it over asyncio streams; a
    listener may drive it from the raw socket (``_preauth``) so that a stranger costs no
    transport. Each step raises :class:`HandshakeFailed` (the caller closes the connection).

    ``admit`` and ``on_hello`` as :func:`server_handshake`."""

    def __init__(
        self,
        identity: PskIdentity,
        *,
        on_hello: Callable[[], None] | None = None,
        admit: Callable[[int], bool] | None = None,
    ) -> None:
        self._identity = identity
        self._on_hello = on_hello
        self._admit = admit
        self._hello: tuple[int, bytes, bytes, bytes] | None = None  # peer, key, hello_c, hello_s

    @property
    def greeted(self) -> bool:
        """Whether :meth:`hello` took the client's hello (the proof comes next)."""
        return self._hello is not None

    def hello(self, hello_c: bytes) -> bytes:
        """The client's hello in, the server's hello and proof out."""
        if self._hello is not None:
            raise HandshakeFailed("a second hello")
        peer = _parse_hello(hello_c, self._identity)
        if self._admit is not None and not self._admit(peer):
            raise HandshakeFailed(f"peer {peer} may not open a session (quarantined)")
        key = self._identity.keys.get(peer)
        if key is None:
            raise HandshakeFailed(f"unknown peer {peer}")
        hello_s = _hello(self._identity, os.urandom(32))
        if self._on_hello is not None:
            self._on_hello()
        self._hello = (peer, key, hello_c, hello_s)
        return hello_s + _mac(key, _LABEL_SERVER, hello_c, hello_s)

    def proof(self, proof_c: bytes) -> AuthenticatedPeer:
        """The client's proof in; the authenticated peer out."""
        if self._hello is None:
            raise HandshakeFailed("a proof before the hello")
        peer, key, hello_c, hello_s = self._hello
        if not hmac.compare_digest(proof_c, _mac(key, _LABEL_CLIENT, hello_c, hello_s)):
            raise HandshakeFailed(f"peer {peer} failed to prove its key")
        return AuthenticatedPeer(peer=peer, data_key=_mac(key, _LABEL_DATA, hello_c, hello_s))


async def server_handshake(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    identity: Identity,
    *,
    on_hello: Callable[[], None] | None = None,
    admit: Callable[[int], bool] | None = None,
) -> AuthenticatedPeer:
    """Run the server side. Raises :class:`HandshakeFailed`; nothing is decoded beyond the
    fixed-size fields, and no key is looked up for an id before its hello parsed.

    ``admit(peer)`` is asked as soon as the hello names ``peer``: ``False`` (a quarantined
    peer) ends the handshake there, before any MAC is computed or sent. Refusing a *claim*
    is safe only for ids that are shut out anyway: a stranger claiming one locks out nobody.
    ``on_hello()`` runs once the client's hello named a peer we could talk to (PSK: one we
    hold a key for; TLS: one its certificate names): progress, which puts this connection
    back at the end of the listener's door (``_door``)."""
    hello_c = await _read(reader, _HELLO.size)
    if isinstance(identity, PskIdentity):
        steps = PskServerSteps(identity, on_hello=on_hello, admit=admit)
        writer.write(steps.hello(hello_c))
        await writer.drain()
        return steps.proof(await _read(reader, _PROOF_BYTES))
    peer = _parse_hello(hello_c, identity)
    if admit is not None and not admit(peer):
        raise HandshakeFailed(f"peer {peer} may not open a session (quarantined)")
    hello_s = _hello(identity, os.urandom(32))
    _check_tls_peer(identity, writer, peer)
    if on_hello is not None:
        on_hello()
    secret_s = os.urandom(_PROOF_BYTES)
    writer.write(hello_s + secret_s)
    await writer.drain()
    secret_c = await _read(reader, _PROOF_BYTES)
    data_key = _mac(secret_s + secret_c, _LABEL_DATA, hello_c, hello_s)
    return AuthenticatedPeer(peer=peer, data_key=data_key)


def data_bind_proof(data_key: bytes, challenge: bytes, peer: int, rail: int) -> bytes:
    """The connector's answer to a data listener's challenge (``BIND.size`` bytes)."""
    mac = _mac(data_key, _LABEL_BIND, challenge, struct.pack("!QH", peer, rail))
    return BIND.pack(_BIND_MAGIC, peer, rail, mac)


def parse_bind(raw: bytes) -> tuple[int, int, bytes]:
    """``(peer, rail, mac)`` of a bind answer. Raises :class:`HandshakeFailed` on a bad magic."""
    magic, peer, rail, mac = BIND.unpack(raw)
    if magic != _BIND_MAGIC:
        raise HandshakeFailed("not a TENT data connection")
    return int(peer), int(rail), bytes(mac)


def check_bind(data_key: bytes, challenge: bytes, peer: int, rail: int, mac: bytes) -> bool:
    """Whether ``mac`` proves the bind of ``(peer, rail)`` to the session of ``data_key``."""
    expected = _mac(data_key, _LABEL_BIND, challenge, struct.pack("!QH", peer, rail))
    return hmac.compare_digest(mac, expected)
