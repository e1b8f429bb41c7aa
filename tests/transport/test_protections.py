"""Issue 27, "Protections no test guards": each protection of docs/abuse.md at unit level, fast
and without sockets (their end-to-end tests are in ``net/test_protections_wire.py``)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import ssl
import struct
import types

import pytest
from tent_transport.control import (
    HandshakeFailed,
    PskIdentity,
    TlsIdentity,
    check_bind,
    parse_bind,
)
from tent_transport.control import data_bind_proof as bind_proof
from tent_transport.control._handshake import server_handshake
from tent_transport.devices import SliceStatus
from tent_transport.dispatch import TransferPhase
from tent_transport.engine._receiving import ReceiverSide
from tent_transport.segments import SegmentTable
from test_dispatch_credit import Rig, legacy_window_core, request
from transport_fakes import write_header

from tent_credit import (
    AllocatorConfig,
    CreditReceiver,
    CreditResource,
    SessionId,
)
from tent_sched import TaskStatus

R = CreditResource
PEER, OLD, NEW = 4, 10, 11

# ----------------------------------------------------------------- the control handshake


class _Writer:
    """What the server half writes, and nothing else of a stream."""

    def __init__(self) -> None:
        self.out = b""

    def write(self, data: bytes) -> None:
        self.out += data

    async def drain(self) -> None:
        return None


def _psk_server_run(proof_key: bytes) -> tuple[object, bytes]:
    """The listener's half of a PSK handshake against a client that claims peer 1 and proves
    with ``proof_key``: what it returned (or raised) and the listener's hello."""
    key = b"k" * 32
    identity = PskIdentity(local_peer=2, keys={1: key})
    hello_c = struct.pack("!4sHBQ32s", b"TENT", 1, 1, 1, os.urandom(32))

    async def scenario() -> tuple[object, bytes]:
        reader = asyncio.StreamReader()
        writer = _Writer()
        reader.feed_data(hello_c)
        task = asyncio.ensure_future(server_handshake(reader, writer, identity))  # type: ignore[arg-type]
        while len(writer.out) < 47 + 32:
            await asyncio.sleep(0)
        hello_s = writer.out[:47]
        label = b"tent-control-v1 client proof"
        reader.feed_data(hmac.new(proof_key, label + hello_c + hello_s, hashlib.sha256).digest())
        try:
            return await task, hello_s
        except HandshakeFailed as exc:
            return exc, hello_s

    return asyncio.run(scenario())


def test_the_listener_refuses_a_client_proof_made_without_the_claimed_peers_key() -> None:
    outcome, _ = _psk_server_run(b"x" * 32)
    assert isinstance(outcome, HandshakeFailed)
    honest, _ = _psk_server_run(b"k" * 32)  # the same client with the key gets in
    assert getattr(honest, "peer", None) == 1


class _TlsWriter(_Writer):
    """A TLS stream whose verified certificate names ``name``."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self._cert = {"subjectAltName": (("DNS", name),)}

    def get_extra_info(self, what: str) -> object:
        return self._cert if what == "peercert" else None


@pytest.mark.parametrize("claim", [1, 3], ids=["claims-another-peer", "claims-its-own"])
def test_the_tls_listener_refuses_a_claim_its_certificate_does_not_name(claim: int) -> None:
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    identity = TlsIdentity(
        local_peer=2,
        server_context=server_ctx,
        client_context=ssl.create_default_context(),
        peer_names={1: "sender-1.tent", 3: "sender-3.tent"},
    )

    async def scenario() -> object:
        reader = asyncio.StreamReader()
        reader.feed_data(struct.pack("!4sHBQ32s", b"TENT", 1, 2, claim, os.urandom(32)))
        reader.feed_data(os.urandom(32))  # the client's secret
        writer = _TlsWriter("sender-3.tent")  # the certificate of peer 3
        try:
            return await server_handshake(reader, writer, identity)  # type: ignore[arg-type]
        except HandshakeFailed as exc:
            return exc

    outcome = asyncio.run(scenario())
    if claim == 1:
        assert isinstance(outcome, HandshakeFailed)
    else:
        assert getattr(outcome, "peer", None) == 3


# ----------------------------------------------------------------- the data bind


def test_a_bind_proves_the_session_key_the_challenge_the_peer_and_the_rail() -> None:
    key, challenge = os.urandom(32), os.urandom(32)
    peer, rail, mac = parse_bind(bind_proof(key, challenge, 7, 1))
    assert (peer, rail) == (7, 1)
    assert check_bind(key, challenge, 7, 1, mac)
    assert not check_bind(os.urandom(32), challenge, 7, 1, mac)  # another session's key
    assert not check_bind(key, os.urandom(32), 7, 1, mac)  # a replayed bind
    assert not check_bind(key, challenge, 8, 1, mac)  # another peer
    assert not check_bind(key, challenge, 7, 0, mac)  # another rail
    with pytest.raises(HandshakeFailed):
        parse_bind(b"XXXX" + bind_proof(key, challenge, 7, 1)[4:])


# ----------------------------------------------------------------- write admission


def _receiver_side() -> tuple[ReceiverSide, CreditReceiver, int, dict[int, object]]:
    config = AllocatorConfig(
        capacity={R.DATA_BYTES: 1 << 20, R.REQUEST_SLOTS: 8, R.CONSUMER_SLOTS: 8},
        control_slots=2,
        max_grant={R.DATA_BYTES: 1 << 20, R.REQUEST_SLOTS: 8, R.CONSUMER_SLOTS: 8},
        max_keys=4,
        retry_after_us=100,
    )
    credit = CreditReceiver(config, SessionId(99))
    endpoint = credit.accept(PEER, 0)
    credit.allocator.grant(
        PEER, 0, {R.DATA_BYTES: 1 << 20, R.REQUEST_SLOTS: 8, R.CONSUMER_SLOTS: 8}
    )
    side = ReceiverSide(credit=credit, segments=SegmentTable())
    sessions: dict[int, object] = {
        PEER: types.SimpleNamespace(
            session=NEW,
            epoch=endpoint.epoch,
            endpoint=types.SimpleNamespace(version=1),  # credit was negotiated
            connection=types.SimpleNamespace(close=lambda reason: None),
        )
    }
    side.control = types.SimpleNamespace(session_of=sessions.get)  # type: ignore[assignment]
    return side, credit, endpoint.epoch, sessions


def test_a_write_on_a_superseded_session_is_refused_by_admission() -> None:
    side, _, epoch, _ = _receiver_side()
    assert side.admit(PEER, OLD, write_header(OLD, epoch, 64, 64)) == "no live control session"
    assert side.admit(PEER, NEW, write_header(NEW, epoch, 64, 64)) is None  # the live one lands


def test_an_uncredited_write_on_a_superseded_session_is_refused_too() -> None:
    side = ReceiverSide(credit=None, segments=SegmentTable())
    current = types.SimpleNamespace(session=NEW, epoch=0, endpoint=None)
    side.control = types.SimpleNamespace(session_of={PEER: current}.get)  # type: ignore[assignment]
    stale = write_header(OLD, 0, 64, 0, credited=False)
    assert side.admit(PEER, OLD, stale) == "no live control session"
    assert side.admit(PEER, NEW, write_header(NEW, 0, 64, 0, credited=False)) is None


@pytest.mark.parametrize("data_bytes", [63, 1, 65], ids=["undercharge", "tiny", "overcharge"])
def test_a_write_must_charge_exactly_the_bytes_it_lands(data_bytes: int) -> None:
    side, credit, epoch, _ = _receiver_side()
    reason = side.admit(PEER, NEW, write_header(NEW, epoch, 64, data_bytes))
    assert reason == "the lease's DATA_BYTES differ from the write's length"
    assert credit.allocator.statistics().writes_admitted == 0  # refused before admit_write


# ----------------------------------------------------------------- a failed transfer's credit


def test_a_failed_transfer_ends_its_gate_reservation() -> None:
    rig = Rig(initial_owners=1)
    (tid,) = rig.core.submit([request()], 10)
    rig.rail.finish(status=SliceStatus.INTEGRITY_ERROR)
    (event,) = rig.core.progress(20)
    assert event.transfer_id == tid and event.status is TaskStatus.FAILED
    route = rig.gate.statistics().routes[0]
    assert (route.committed, route.completed) == (1, 1)
    assert rig.tx.statistics().in_flight == 0  # nothing left counted in flight


def test_a_failed_transfer_gives_its_legacy_window_slot_back() -> None:
    core, rail, _gate = legacy_window_core()
    first, second = core.submit([request(), request()], 10)
    assert core.status(second).phase is TransferPhase.QUEUED  # the window holds one
    rail.finish(status=SliceStatus.INTEGRITY_ERROR)
    events = core.progress(20)
    assert [(e.transfer_id, e.status) for e in events] == [(first, TaskStatus.FAILED)]
    assert core.status(second).phase is TransferPhase.DISPATCHED  # the slot came back
