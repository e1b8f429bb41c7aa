"""COMPLETED means admitted, over verbs (docs/transport_design.md#transport-rule-5): the receiver's
VerbsAck.

The sender's HCA completes a one-sided WRITE when the receiver's HCA acknowledged it, before
any receiver code ran. These tests pause the receiver's arrival polling (what a loaded receiver
does by itself) to put the two moments apart deterministically.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from net_helpers import run, until, verbs_receiver, write_request
from tent_transport.devices import SliceCompletion, SliceStatus
from tent_transport.devices.verbs import AckOutcome, VerbsAck, VerbsDeviceConfig, soft_backend
from tent_transport.devices.verbs import _receiver as _verbs_receiver
from tent_transport.devices.verbs._rail import VerbsRail, _Link
from tent_transport.errors import LocalProtocolError
from verbs_engine import BLOCK, connected, engines, fabric, pause_admission

from tent_sched import TaskStatus

__all__ = ["fabric"]  # the autouse fixture: a private soft-verbs fabric per test


def test_a_write_the_receiver_never_admitted_ends_fenced_never_completed() -> None:
    """The HCA acknowledges a one-sided write before any receiver code ran. If the session
    ends before the receiver admits it, the fence drops it unannounced and gives its credit
    back: the sender's handle must not say COMPLETED (docs/transport_design.md#transport-rule-5). It
    stays pending
    until the receiver's acknowledgement, and ends FAILED ("fenced") when none can come."""

    async def scenario() -> None:
        rx, tx = engines()
        try:
            peer, segment, _ = await connected(rx, tx, 4 * BLOCK)
            rail = tx.rails[0]
            pause_admission(rx)  # for good: the fence's own drain finds the arrival
            handle = tx.submit([write_request(peer, segment, 0, os.urandom(BLOCK))])
            # the HCA completed the write: the rail holds it for its acknowledgement
            await until(lambda: len(rail._links[peer].held) == 1, what="the HCA's completion")
            assert handle.status().pending  # landed in memory, not admitted: not complete
            tx._links[peer].client.drop_connection()  # the session ends before admission
            state = await handle.wait(10)
            assert state.status is TaskStatus.FAILED and "fenced" in state.detail, state
            verbs = verbs_receiver(rx)
            assert verbs is not None
            await until(lambda: verbs.statistics().dropped_arrivals >= 1, what="the drop")
            assert rx.receiver.statistics().landed == 0  # never announced
            assert rx.credit is not None
            await until(
                lambda: set(rx.credit.allocator.statistics().outstanding.values()) == {0},
                what="the fenced credit back",
            )
        finally:
            await tx.close()
            await rx.close()

    run(scenario(), timeout=60)


def test_a_completed_write_was_admitted_first() -> None:
    """COMPLETED means admitted: with the receiver paused, the handle waits; once it admits
    the write, its acknowledgement completes the handle, after the data-landed event."""

    async def scenario() -> None:
        rx, tx = engines()
        try:
            peer, segment, memory = await connected(rx, tx, 4 * BLOCK)
            rail = tx.rails[0]
            resume = pause_admission(rx)
            data = os.urandom(BLOCK)
            handle = tx.submit([write_request(peer, segment, BLOCK, data)])
            await until(lambda: len(rail._links[peer].held) == 1, what="the HCA's completion")
            assert handle.status().pending and rx.receiver.statistics().landed == 0
            resume()
            state = await handle.wait(10)
            assert state.status is TaskStatus.COMPLETED
            assert rx.receiver.statistics().landed == 1  # admitted before the ack went out
            event = await rx.landed()
            assert bytes(memory[event.offset : event.offset + BLOCK]) == data
            assert verbs_receiver(rx).statistics().acks_sent >= 1
        finally:
            await tx.close()
            await rx.close()

    run(scenario(), timeout=60)


def test_an_overwritten_write_is_superseded_not_a_lie() -> None:
    """Two writes of one sender into the same range, both landed before the receiver looked:
    the first one's bytes are gone, so its checksum cannot hold. That is not a lie (the later
    notice in the ring says why): the first ends INTEGRITY_ERROR ("superseded"), the second
    completes, nobody is quarantined, and every credit comes back."""

    async def scenario() -> None:
        rx, tx = engines("disabled")
        try:
            peer, segment, memory = await connected(rx, tx, 4 * BLOCK)
            rail = tx.rails[0]
            resume = pause_admission(rx)
            first, second = os.urandom(BLOCK), os.urandom(BLOCK)
            h1 = tx.submit([write_request(peer, segment, 0, first)])
            h2 = tx.submit([write_request(peer, segment, BLOCK // 2, second)])  # overlaps the first
            await until(lambda: len(rail._links[peer].held) == 2, what="both HCA completions")
            resume()
            s1, s2 = await h1.wait(10), await h2.wait(10)
            assert s1.status is TaskStatus.FAILED and "superseded" in s1.detail, s1
            assert s2.status is TaskStatus.COMPLETED
            assert rx.quarantined() == () and rx.receiver.statistics().refused == 0
            event = await rx.landed()
            assert event.offset == BLOCK // 2 and rx.receiver.statistics().landed == 1
            assert bytes(memory[BLOCK // 2 : BLOCK // 2 + BLOCK]) == second
            assert verbs_receiver(rx).statistics().superseded == 1
        finally:
            await tx.close()
            await rx.close()

    run(scenario(), timeout=60)


def test_a_receiver_that_cannot_acknowledge_is_refused_not_trusted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Versioning: a receiver that speaks verbs schema 1 (no acknowledgements) answers in
    schema 1 and never acks. A schema-2 sender does not fall back to completing at its HCA's
    completion (that would report COMPLETED for writes nobody admitted): the exchange is
    refused with the reason, no QP is brought up, and submits to that peer raise."""
    monkeypatch.setattr(_verbs_receiver, "VERBS_SCHEMA", 1)

    async def scenario() -> None:
        rx, tx = engines()
        host, port = await rx.start()
        await tx.start()
        try:
            peer = await tx.connect(host, port)
            link = tx._links[peer]
            await until(lambda: bool(link.refused), what="the refusal")
            assert "schema 1" in link.refused
            verbs = verbs_receiver(rx)
            assert verbs is not None and verbs._sessions[1].schema == 1
            assert not tx.rails[0].device.post_budget(peer)  # no QP at RTS on our side
            with pytest.raises(LocalProtocolError, match="schema 1"):
                tx.submit([write_request(peer, 1, 0, bytes(BLOCK))])
            assert tx.core.statistics().submitted_total == 0
        finally:
            await tx.close()
            await rx.close()

    run(scenario())


@pytest.mark.parametrize("ended_first", [False, True])
def test_a_refusal_acknowledged_before_the_hca_flush_is_what_the_write_reports(
    ended_first: bool, tmp_path: Path
) -> None:
    """The receiver's REFUSED ack can overtake the write's own HCA completion: the refusal closes
    the connection, the QP goes to ERR and that completion comes back FLUSHED. The handle must
    still see WRITE_REFUSED (the receiver's verdict), whether or not the session ended in
    between; a flush after an ADMITTED ack stays a flush (the rail cannot vouch for it)."""
    rail = VerbsRail(
        soft_backend(tmp_path), VerbsDeviceConfig(device_name="soft0"), name="r0", rail=0
    )
    link = _Link(session=7, sequence=2)
    rail._write_of = {11: (link, 0), 12: (link, 1)}
    assert rail._acknowledged(link, VerbsAck(session=7, through=2, outcome=AckOutcome.REFUSED))
    if ended_first:
        rail._end_link(link)
    flushed = [SliceCompletion(wr_id=w, status=SliceStatus.FLUSHED, length=BLOCK) for w in (11, 12)]
    first, second = (rail._gate(c) for c in flushed)
    assert first is not None and first.status is SliceStatus.FLUSHED  # admitted, then flushed
    assert second is not None and second.status is SliceStatus.WRITE_REFUSED
    assert link.outcomes == {}  # every verdict is consumed by its completion
