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
from tent_transport.devices import Opcode, SliceRequest, SliceStatus
from tent_transport.engine import _engine
from verbs_engine import BLOCK, connected, engines, fabric, move

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
        rx, tx = engines()
        host, port = await rx.start()
        await tx.start()
        try:
            verbs = verbs_receiver(rx)
            assert verbs is not None
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
        finally:
            await tx.close()
            await rx.close()

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
