"""The control service: one authenticated control connection per (sender, receiver) pair.

Length-prefixed CBOR frames (:mod:`._frames`), identity bound at the handshake by mutual TLS or
a pre-shared key (:mod:`._handshake`), and the sans-IO credit endpoints pumped over it
(:mod:`._service`).
"""

from __future__ import annotations

from ._bootstrap import BootstrapError, SessionBootstrap
from ._client import ControlClient, SenderHooks
from ._common import ServiceStatistics
from ._connection import CONTROL_SO_PRIORITY, ControlConnection, ControlStatistics, tune_socket
from ._errors import ConnectionLost, FrameError, HandshakeFailed
from ._frames import FRAME_BOUNDS, FrameDecoder, FrameKind, encode_frame
from ._handshake import (
    BIND,
    CHALLENGE_BYTES,
    AuthenticatedPeer,
    HandshakeMode,
    PskIdentity,
    TlsIdentity,
    check_bind,
    client_handshake,
    data_bind_proof,
    parse_bind,
    server_handshake,
)
from ._rate import ControlRate
from ._service import ControlServer, PeerSession, ReceiverHooks

__all__ = [
    "BIND",
    "CHALLENGE_BYTES",
    "CONTROL_SO_PRIORITY",
    "FRAME_BOUNDS",
    "AuthenticatedPeer",
    "BootstrapError",
    "ConnectionLost",
    "ControlClient",
    "ControlConnection",
    "ControlRate",
    "ControlServer",
    "ControlStatistics",
    "FrameDecoder",
    "FrameError",
    "FrameKind",
    "HandshakeFailed",
    "HandshakeMode",
    "PeerSession",
    "PskIdentity",
    "ReceiverHooks",
    "SenderHooks",
    "ServiceStatistics",
    "SessionBootstrap",
    "TlsIdentity",
    "check_bind",
    "client_handshake",
    "data_bind_proof",
    "encode_frame",
    "parse_bind",
    "server_handshake",
    "tune_socket",
]
