"""Receiver protection over verbs (issue 12): rkeys only under credit, and none after fencing.

A one-sided write needs an rkey and nothing else, so the rkey *is* the permission: it must not
reach a sender that holds no credit, and a fenced session's rkeys must stop working at the
receiver's HCA, whoever still holds them.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from net_helpers import run, until, verbs_receiver, write_request
from tent_transport.control import FrameKind
from tent_transport.devices import Opcode, SliceRequest, SliceStatus
from tent_transport.devices.verbs import VerbsRegion, decode_verbs_message
from tent_transport.devices.verbs._notice import NOTICE_SEGMENT
from tent_transport.engine import _engine
from verbs_engine import BLOCK, connected, engines, fabric, move, started

from tent_credit import NegotiationState, SenderEndpoint
from tent_sched import TaskStatus

__all__ = ["fabric"]  # the autouse fixture: a private soft-verbs fabric per test


def test_a_sender_that_gets_no_grant_never_holds_an_rkey(monkeypatch: pytest.MonkeyPatch) -> None:
    """A credit-speaking sender with no version in common with the receiver is never granted
    anything. It learns its regions (the descriptors, rkey 0) but never an rkey: the receiver
    keeps deferring the VerbsRegion frames, the sender's rail never becomes ready, and its
    write fails explicitly (required mode) without a byte leaving."""

    def no_common_version(**kwargs: Any) -> SenderEndpoint:
        # the engine passes its configured versions; this sender offers one nobody speaks
        return SenderEndpoint(**{**kwargs, "versions": (0xFFFE,)})

    monkeypatch.setattr(_engine, "SenderEndpoint", no_common_version)

    async def scenario() -> None:
        async with started() as (rx, tx, host, port):
            verbs = verbs_receiver(rx)
            decisions: list[bool] = []
            granted = verbs._granted

            def watched(session: Any) -> bool:
                decisions.append(granted(session))
                return decisions[-1]

            verbs._granted = watched  # type: ignore[method-assign]
            peer = await tx.connect(host, port)
            memory = rx.allocate(4 * BLOCK)
            segment = rx.register(memory)
            rx.expose(1, segment.segment_id, 0, 4 * BLOCK)
            descriptors = await tx.wait_regions(peer, lambda d: bool(d.regions))
            assert [d.rkey for d in descriptors.regions] == [0]  # descriptors carry no rkey
            endpoint = tx._links[peer].endpoint
            assert endpoint is not None
            await until(lambda: endpoint.state is NegotiationState.FAILED, what="no common version")
            seen = len(decisions)
            await until(lambda: len(decisions) >= seen + 2, what="the deferred offers re-checked")
            assert not any(decisions)
            rx_session = verbs._sessions[1]
            assert not rx_session.ring_offered and not rx_session.offered
            state = tx.rails[0].device._peers[peer]
            assert state.regions == {}  # the sender holds no rkey at all
            assert not tx.rails[0].ready(peer)
            outcome = await tx.submit(
                [write_request(peer, segment.segment_id, 0, os.urandom(BLOCK))]
            ).wait(10)
            assert outcome.status is TaskStatus.FAILED and "credit" in outcome.detail, outcome
            assert tx.rails[0].statistics().posted == 0 and rx.receiver.statistics().landed == 0
            assert bytes(memory) == bytes(4 * BLOCK)

    run(scenario(), timeout=60)


def test_the_ring_goes_out_behind_every_region_so_a_ready_sender_holds_them() -> None:
    """A sender posts once it holds the receiver's notice ring (``VerbsRail.ready``), so the
    ring's region must reach it after every data region the receiver registered by then: the
    frames arrive in order, but a read may split them, and a post between the ring and a
    region is refused by the sender's own device (the write fails). Here two regions are
    registered while the rkeys are held back (no grant yet), the first publication of a data
    region is refused (a full control queue), and the ring may only go out once both regions
    have; the sender ends up ready with both and moves a block into each."""

    async def scenario() -> None:
        async with started() as (rx, tx, host, port):
            verbs = verbs_receiver(rx)
            hold = [True]
            granted = verbs._granted
            verbs._granted = lambda session: not hold[0] and granted(session)  # type: ignore[method-assign]
            peer = await tx.connect(host, port)
            await until(lambda: 1 in verbs._sessions, what="the verbs exchange")
            rx_session = verbs._sessions[1]
            memory = rx.allocate(8 * BLOCK)
            first = rx.register(memory[: 4 * BLOCK])
            second = rx.register(memory[4 * BLOCK :])
            rx.expose(1, first.segment_id, 0, 4 * BLOCK)
            rx.expose(1, second.segment_id, 0, 4 * BLOCK)
            assert len(rx_session.regions) == 2 and not rx_session.offered
            publish = rx_session.ps.connection.publish
            log: list[str] = []  # what went out, in order
            at_ring: list[bool] = []  # were all regions out when the ring went?
            refused = [False]

            def watched(kind: FrameKind, payload: bytes) -> bool:
                if kind is not FrameKind.VERBS:
                    return publish(kind, payload)
                message = decode_verbs_message(payload)
                if isinstance(message, VerbsRegion) and message.segment == NOTICE_SEGMENT:
                    at_ring.append(set(rx_session.regions) <= rx_session.offered)
                    log.append("ring")
                elif isinstance(message, VerbsRegion):
                    if not refused[0]:
                        refused[0] = True
                        log.append("refused")
                        return False
                    log.append(f"region {message.segment}")
                return publish(kind, payload)

            rx_session.ps.connection.publish = watched
            hold[0] = False
            await until(lambda: tx.rails[0].ready(peer), what="the ring at the sender")
            assert at_ring == [True], log
            assert log[0] == "refused" and log[-1] == "ring", log
            held = tx.rails[0].device._peers[peer].regions
            assert {first.segment_id, second.segment_id} <= set(held)
            for segment in (first.segment_id, second.segment_id):
                outcome = await tx.submit(
                    [write_request(peer, segment, 0, os.urandom(BLOCK))]
                ).wait(10)
                assert outcome.status is TaskStatus.COMPLETED, outcome
                rx.release(await rx.landed())

    run(scenario(), timeout=60)


def test_a_fenced_sessions_rkey_fails_at_the_hca_and_writes_nothing() -> None:
    """After a session is fenced, its rkeys are deregistered: a write that still uses one (here
    through the sender's new QP, the strongest case: a live, connected QP) fails at the HCA
    with a remote access error and writes nothing; the new session's rkeys work."""

    async def scenario() -> None:
        rx, tx = engines()
        try:
            peer, segment, memory = await connected(rx, tx, 8 * BLOCK)
            await move(rx, tx, peer, segment, memory, n=1)
            device = tx.rails[0].device
            old = device._peers[peer].regions[segment][0]
            verbs = verbs_receiver(rx)
            assert verbs is not None
            old_session = verbs._sessions[1].ps.session
            tx._links[peer].client.drop_connection()
            await until(lambda: tx._links[peer].sessions_started == 2, what="the new session")
            await until(
                lambda: (
                    verbs._sessions.get(1) is not None
                    and verbs._sessions[1].ps.session != old_session
                ),
                what="the receiver's new session",
            )
            assert verbs.device.exposures.regions(1, old_session) == ()
            assert verbs.device.context._keys.lookup(old.rkey) is None
            rx.expose(1, segment, 0, 8 * BLOCK)
            await tx.wait_regions(peer, lambda d: d.session != old_session and bool(d.regions))
            await until(lambda: tx.rails[0].ready(peer), what="the new QP")
            await until(lambda: bool(device._peers[peer].regions.get(segment)), what="new rkey")
            new = device._peers[peer].regions[segment][0]
            assert new.rkey != old.rkey
            before = bytes(memory)
            seen: list[Any] = []
            poll = device.poll

            def tee(max_entries: int, now_ns: int) -> list[Any]:
                out = poll(max_entries, now_ns)
                seen.extend(c for c in out if c.wr_id == 77)
                return out

            device.poll = tee  # type: ignore[method-assign]
            device._peers[peer].regions[segment] = [old]  # route the write by the old rkey
            device.post(
                [
                    SliceRequest(
                        wr_id=77,
                        opcode=Opcode.WRITE,
                        peer=peer,
                        local=memoryview(os.urandom(BLOCK)),
                        remote_segment=segment,
                        remote_offset=0,
                        length=BLOCK,
                        lease=None,
                        write_id=77,
                    )
                ],
                0,
            )
            await until(lambda: bool(seen), what="the stale rkey's completion")
            assert seen[0].status is SliceStatus.REMOTE_ACCESS_ERROR, seen[0]
            assert bytes(memory) == before  # nothing landed
        finally:
            await tx.close()
            await rx.close()

    run(scenario(), timeout=60)
