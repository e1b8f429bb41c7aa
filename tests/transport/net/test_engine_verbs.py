"""The engine over the soft verbs device in one process: the QP exchange on the control
connection, rkeys per (peer, session), admission at the notice, and fencing
(docs/transport_design.md#leases: ``fence_complete`` only once the old session's MRs are invalid and
its QP is in ERR and drained).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import attrs
import pytest
from net_helpers import run, until, verbs_receiver, write_request
from procs import credit_config
from tent_transport.config import load_engine_config
from tent_transport.control import FrameKind, PskIdentity
from tent_transport.devices import Opcode
from tent_transport.devices.verbs import (
    VerbsRegion,
    decode_verbs_message,
    encode_verbs_message,
    soft,
)
from tent_transport.devices.verbs.soft import _hca
from tent_transport.dispatch import TransferPlan, TransferRequest
from tent_transport.engine import Engine, EngineOptions
from tent_transport.errors import LocalProtocolError
from tent_transport.segments import Access
from verbs_engine import BLOCK, connected, engines, fabric, move, started

from tent_credit import CreditResource
from tent_sched import TaskStatus

__all__ = ["fabric"]  # the autouse fixture: a private soft-verbs fabric per test


def test_verbs_engine_moves_verified_bytes_and_every_credit_comes_back() -> None:
    async def scenario() -> None:
        rx, tx = engines()
        try:
            peer, segment, memory = await connected(rx, tx, 8 * BLOCK)
            await move(rx, tx, peer, segment, memory, n=8)  # 8 blocks, 4 slots
            assert rx.credit is not None
            await until(
                lambda: set(rx.credit.allocator.statistics().outstanding.values()) == {0},
                what="every credit back",
            )
            stats = rx.receiver.statistics()
            assert stats.landed == 8 and stats.refused == 0 and stats.quarantined == ()
        finally:
            await tx.close()
            await rx.close()

    run(scenario())


def test_verbs_read_of_a_readable_exposure_returns_its_bytes() -> None:
    """READ is an RDMA READ under the exposure's MR (registered with REMOTE_READ), local
    accounting only; a write-only exposure cannot be read (refused at the sender's post)."""

    async def scenario() -> None:
        rx, tx = engines()
        host, port = await rx.start()
        await tx.start()
        try:
            peer = await tx.connect(host, port)
            memory = rx.allocate(4 * BLOCK)
            content = os.urandom(4 * BLOCK)
            memory[:] = content
            segment = rx.register(memory)
            rx.expose(1, segment.segment_id, 0, 2 * BLOCK, Access.WRITE | Access.READ)
            rx.expose(1, segment.segment_id, 2 * BLOCK, 2 * BLOCK, Access.WRITE)
            await tx.wait_regions(peer, lambda d: len(d.regions) == 2)
            await until(lambda: tx.rails[0].ready(peer), what="rkeys at the sender")
            await until(
                lambda: (
                    len(tx.rails[0].device._peers[peer].regions.get(segment.segment_id, ())) == 2
                ),
                what="both regions",
            )
            into = bytearray(BLOCK)
            read = TransferRequest(
                opcode=Opcode.READ,
                local=into,
                peer=peer,
                remote_segment=segment.segment_id,
                remote_offset=BLOCK,
                length=BLOCK,
            )
            assert (await tx.submit([read]).wait(10)).status is TaskStatus.COMPLETED
            assert bytes(into) == content[BLOCK : 2 * BLOCK]
            assert tx.rails[0].statistics().bytes_read == BLOCK
            denied = attrs.evolve(read, local=bytearray(BLOCK), remote_offset=3 * BLOCK)
            assert (await tx.submit([denied]).wait(10)).status is TaskStatus.FAILED
            assert rx.receiver.statistics().landed == 0  # reads land nothing at the receiver
        finally:
            await tx.close()
            await rx.close()

    run(scenario())


def test_verbs_fence_completes_only_after_mrs_are_invalid_and_the_qp_is_drained() -> None:
    async def scenario() -> None:
        rx, tx = engines()
        try:
            peer, segment, memory = await connected(rx, tx, 8 * BLOCK)
            await move(rx, tx, peer, segment, memory, n=2)
            verbs = verbs_receiver(rx)
            assert verbs is not None and rx.credit is not None
            old = verbs._sessions[1]
            rkeys = [r.rkey for r in old.regions.values()] + [old.ring_region.rkey]
            keys = verbs.device.context._keys
            assert all(keys.lookup(k) is not None for k in rkeys)
            seen: list[dict[str, Any]] = []
            fence_complete = rx.credit.fence_complete

            def observed(peer_id: int, qos: int, epoch: int) -> Any:
                seen.append(
                    {
                        "live_rkeys": [k for k in rkeys if keys.lookup(k) is not None],
                        "mrs": verbs.device.exposures.regions(1, old.ps.session),
                        "qp_live": 1 in verbs.device._peers,
                        "session_live": verbs._sessions.get(1) is old,
                    }
                )
                return fence_complete(peer_id, qos, epoch)

            rx.credit.fence_complete = observed  # type: ignore[method-assign]
            tx._links[peer].client.drop_connection()  # a real disconnect: the receiver fences
            await until(lambda: bool(seen), what="fence_complete")
            assert seen[0] == {"live_rkeys": [], "mrs": (), "qp_live": False, "session_live": False}
            # the sender reconnects: a new session, a new QP, new rkeys; nothing hangs
            await until(lambda: tx._links[peer].sessions_started == 2, what="the new session")
            rx.expose(1, segment, 0, 8 * BLOCK)
            await tx.wait_regions(peer, lambda d: d.session != old.ps.session and bool(d.regions))
            await until(lambda: tx.rails[0].ready(peer), what="the new QP")
            assert verbs._sessions[1] is not old
            await move(rx, tx, peer, segment, memory, n=4)
            await until(
                lambda: (
                    rx.credit is not None
                    and rx.credit.allocator.statistics().outstanding[CreditResource.DATA_BYTES] == 0
                ),
                what="the new session's credit back",
            )
        finally:
            await tx.close()
            await rx.close()

    run(scenario(), timeout=60)


def test_a_failed_qp_restarts_the_session_and_later_writes_complete() -> None:
    """A revoked region's rkey fails the next write (REMOTE_ACCESS_ERROR: RC moves the QP to
    ERR); the rail does not stay without a QP: the session restarts and new writes complete."""

    async def scenario() -> None:
        rx, tx = engines()
        host, port = await rx.start()
        await tx.start()
        try:
            peer = await tx.connect(host, port)
            memory = rx.allocate(8 * BLOCK)
            segment = rx.register(memory)
            exposure = rx.expose(1, segment.segment_id, 0, 8 * BLOCK)
            await tx.wait_regions(peer, lambda d: bool(d.regions))
            await move(rx, tx, peer, segment.segment_id, memory, n=1)
            rx.revoke(exposure)  # its MR is deregistered: the sender still holds the rkey
            state = await tx.submit(
                [write_request(peer, segment.segment_id, 0, bytes(BLOCK))]
            ).wait(10)
            assert state.status is TaskStatus.FAILED
            assert "REM_ACCESS" in state.detail or "remote" in state.detail.lower(), state.detail
            assert rx.receiver.statistics().landed == 1  # nothing of it was announced
            await until(lambda: tx._links[peer].sessions_started == 2, what="a new session")
            rx.expose(1, segment.segment_id, 0, 8 * BLOCK)
            await tx.wait_regions(peer, lambda d: bool(d.regions))
            await until(lambda: tx.rails[0].ready(peer), what="the new QP")
            await move(rx, tx, peer, segment.segment_id, memory, n=2)
        finally:
            await tx.close()
            await rx.close()

    run(scenario(), timeout=60)


def test_verbs_rkeys_go_out_only_after_the_activation() -> None:
    """A session that negotiates credit gets its rkeys only after its activation (with the
    initial grant) went out: a sender never holds an rkey it has no credit for."""

    async def scenario() -> None:
        async with started() as (rx, tx, host, port):
            verbs = verbs_receiver(rx)
            granted: list[bool] = []
            offer = verbs._offer

            def watched(rx_session: Any) -> None:
                connection = rx_session.ps.connection
                if not hasattr(connection, "_watched"):
                    publish = connection.publish

                    def recorded(kind: FrameKind, payload: bytes) -> bool:
                        if kind is FrameKind.VERBS and isinstance(
                            decode_verbs_message(payload), VerbsRegion
                        ):
                            stats = rx_session.ps.endpoint.statistics()
                            granted.append(stats.version != 0 and stats.messages_sent > 0)
                        return bool(publish(kind, payload))

                    connection.publish = recorded
                    connection._watched = True
                offer(rx_session)

            verbs._offer = watched  # type: ignore[method-assign]
            memory = rx.allocate(4 * BLOCK)
            segment = rx.register(memory)
            peer = await tx.connect(host, port)
            rx.expose(1, segment.segment_id, 0, 4 * BLOCK)
            await tx.wait_regions(peer, lambda d: bool(d.regions))
            await until(lambda: tx.rails[0].ready(peer), what="rkeys at the sender")
            assert len(granted) == 2 and all(granted)  # the notice ring and the region
            await move(rx, tx, peer, segment.segment_id, memory, n=2)

    run(scenario())


@pytest.mark.parametrize("what", ["garbage", "region", "second-endpoint"])
def test_a_bad_verbs_frame_from_a_sender_closes_its_control_connection(what: str) -> None:
    """Hostile exchange input: bytes that are not a verbs message, a region (only receivers
    send those) or a second endpoint in one session close the connection; the session is
    retired (its QP and MRs with it) and the sender's next session works."""

    async def scenario() -> None:
        rx, tx = engines()
        host, port = await rx.start()
        await tx.start()
        try:
            peer = await tx.connect(host, port)
            verbs = verbs_receiver(rx)
            assert verbs is not None
            old = verbs._sessions[1]
            if what == "garbage":
                payload = b"\xff" * 40
            elif what == "region":
                payload = encode_verbs_message(old.ring_region)
            else:
                payload = encode_verbs_message(tx.rails[0].device.endpoint(peer))
            assert tx._links[peer].client.send_verbs(payload)
            await until(lambda: tx._links[peer].sessions_started == 2, what="the new session")
            await until(lambda: verbs._sessions.get(1) not in (None, old), what="a new QP")
            assert rx.quarantined() == ()  # a protocol violation, not a lie about a write
            memory = rx.allocate(4 * BLOCK)
            segment = rx.register(memory)
            rx.expose(1, segment.segment_id, 0, 4 * BLOCK)
            await tx.wait_regions(peer, lambda d: bool(d.regions))
            await until(lambda: tx.rails[0].ready(peer), what="the new QP at the sender")
            await move(rx, tx, peer, segment.segment_id, memory, n=2)
        finally:
            await tx.close()
            await rx.close()

    run(scenario(), timeout=60)


def test_a_staged_write_is_refused_at_submit_over_verbs() -> None:
    async def scenario() -> None:
        rx, tx = engines()
        host, port = await rx.start()
        await tx.start()
        try:
            peer = await tx.connect(host, port)
            request = write_request(peer, 1, 0, bytes(BLOCK), plan=TransferPlan.STAGED)
            with pytest.raises(LocalProtocolError, match="staged"):
                tx.submit([request])
            assert tx.core.statistics().submitted_total == 0  # nothing was submitted
        finally:
            await tx.close()
            await rx.close()

    run(scenario())


def test_a_tcp_engine_has_no_verbs_and_refuses_verbs_frames() -> None:
    async def scenario() -> None:
        config = load_engine_config(credit_config("disabled"))
        rx = Engine(config, EngineOptions(peer_id=2, identity=PskIdentity(local_peer=2, keys={})))
        assert [type(h).__name__ for h in rx.receivers] == ["TcpDataServer"]
        assert isinstance(rx.allocate(8), bytearray)

        class _Conn:
            reason = ""

            def close(self, reason: str) -> None:
                self.reason = reason

        class _Session:
            connection = _Conn()

        session = _Session()
        rx.receiver.verbs_frame(session, b"\x00")  # type: ignore[arg-type]
        assert session.connection.reason == "no verbs on this receiver"
        await asyncio.sleep(0)

    run(scenario())


def test_engines_on_the_default_fabric_leave_no_folder_behind(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``EngineOptions(device="softverbs")`` without ``$TENT_SOFTVERBS_FABRIC`` opens the soft
    device on the per-user default fabric (relocated under ``tmp_path`` here). Two engines
    that moved bytes and closed leave neither a node nor the folder (CI used to leave an empty
    ``/dev/shm/tent-softverbs-<uid>``)."""
    monkeypatch.delenv("TENT_SOFTVERBS_FABRIC")
    monkeypatch.setattr(_hca, "_shm_base", lambda: tmp_path)
    folder = soft.default_fabric()

    async def scenario() -> None:
        rx, tx = engines()
        assert folder.is_dir() and len(list(folder.iterdir())) == 4  # 2 engines x (tx, rx)
        try:
            peer, segment, memory = await connected(rx, tx, 4 * BLOCK)
            await move(rx, tx, peer, segment, memory, n=4)
        finally:
            await tx.close()
            assert folder.is_dir()  # the receiver's nodes are still in it
            await rx.close()

    run(scenario())
    assert not folder.exists()
