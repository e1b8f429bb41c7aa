"""Recorded traces drawn: the first event the spec does not allow marked with the guard that
refused it, and the incast runner's recordings converted into validated traces.

The incast fixture (``fixtures/incast/README.md``) is a real recording of a small run on this
machine. The credit spec rejects it where the implementation does what the spec leaves out:
the receiver opens each key with the allocator's initial grant, and a sender reports its whole
backlog as demand while it still holds credit.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from tent_models.cli import main
from tent_models.conformance.credit import CONFORMANCE_BOUNDS, credit_lockstep
from tent_models.report import recorded_chart, svg
from tent_models.trace import TraceError, TraceRecorder, read_trace, validate_trace
from tent_models.trace._incast import convert_incast
from tent_spec.credit import Update, Usage

FIXTURE = Path(__file__).parent / "fixtures" / "incast"


def lockstep_trace() -> TraceRecorder:
    """The docs/traces.md run: report, grant, deliver, reserve (all of one sender)."""
    recorder = TraceRecorder(CONFORMANCE_BOUNDS, senders=(1, 2))
    run = credit_lockstep(CONFORMANCE_BOUNDS, trace=recorder)
    for action, args in [
        ("report_usage", (0, 1)),
        ("deliver", (0, Usage(2, 1, 1, 1, (0, 0), 1))),
        ("deliver", (0, Update(1, 1, 1, 1, (1, 1)))),
        ("reserve", (0, 0)),
    ]:
        assert run.step(action, args) == "applied"
    return recorder


def test_a_valid_recorded_trace_is_drawn_on_its_nodes_lifelines() -> None:
    recorder = lockstep_trace()
    trace = read_trace(recorder.dumps())
    report = validate_trace(trace)
    chart = recorded_chart(trace, report, ident="ok", title="ok")
    assert report.ok and chart.closing.kind == "accepted"
    assert chart.lifelines == ("sender:1", "sender:2", "network", "receiver")  # all recorded
    drawn = [(r.placement.kind, r.placement.source, r.placement.target) for r in chart.rows]
    assert drawn == [
        ("send", "sender:1", "network"),
        ("deliver", "network", "receiver"),
        ("send", "receiver", "network"),
        ("deliver", "network", "sender:1"),
        ("local", "sender:1", None),
    ]
    assert not any(r.marked for r in chart.rows)


def test_a_per_node_trace_draws_its_node_the_network_and_the_nodes_it_reaches() -> None:
    recorder = lockstep_trace()
    everything = read_trace(recorder.dumps())
    mine = TraceRecorder(CONFORMANCE_BOUNDS, senders=(1, 2), nodes=("sender:1",))
    mine.events = [e for e in recorder.events if e["n"] == "sender:1"]
    trace = read_trace(mine.dumps())
    chart = recorded_chart(trace, validate_trace(trace), ident="one", title="one")
    assert chart.lifelines == ("sender:1", "network")
    assert len(chart.rows) == 3 < len(everything.events)


def test_the_first_refused_event_is_marked_with_its_guard_and_the_allowed_steps() -> None:
    recorder = lockstep_trace()
    recorder.events.append(copy.deepcopy(recorder.events[-1]))  # the reserve, once more
    trace = read_trace(recorder.dumps())
    report = validate_trace(trace)
    assert not report.ok and report.matched == 5
    assert "return_unused(0, 0)" not in report.allowed  # nothing left to return: all consumed
    chart = recorded_chart(trace, report, ident="bad", title="bad")
    marked = [r for r in chart.rows if r.marked]
    assert [r.index for r in marked] == [5] and chart.rows[-1] is marked[0]
    assert marked[0].notes[0] == (
        "refused: reserve(0, 0): reserve(0, 0): insufficient credit in some charged resource "
        "(nothing is reserved)"
    )
    assert chart.closing.heading == "event 5 (sender:1 reserve): no spec step produces it"
    text = svg(chart)
    assert 'class="step box marked"' in text and "insufficient credit" in text


def test_a_repeated_activation_of_the_live_key_is_a_no_op_at_the_sender() -> None:
    # The receiver answers each (retransmitted) offer with an activation; the sender that is
    # already on that key receives the second one and changes nothing.
    recorder = lockstep_trace()
    last_vars = recorder.events[-1]["vars"]
    again = {"type": "CapabilityActivation", "receiver_session_id": 1, "epoch": 1}
    recorder.events.append({"n": "sender:1", "k": "receive", "msg": again, "vars": last_vars})
    assert validate_trace(read_trace(recorder.dumps())).ok
    stale = {"type": "CapabilityActivation", "receiver_session_id": 1, "epoch": 2}
    recorder.events[-1] = {"n": "sender:1", "k": "receive", "msg": stale, "vars": last_vars}
    assert not validate_trace(read_trace(recorder.dumps())).ok  # another key: not a repeat


# --- the incast runner's recordings ------------------------------------------------------------


def test_an_incast_folder_converts_to_one_trace_per_process(tmp_path: Path) -> None:
    written = convert_incast(FIXTURE, tmp_path)
    assert sorted(p.name for p in written) == ["receiver.cbor", "sender-1.cbor", "sender-2.cbor"]
    receiver, sender = (
        read_trace(tmp_path / "receiver.cbor"),
        read_trace(tmp_path / "sender-2.cbor"),
    )
    assert receiver.nodes == ("receiver",) and sender.nodes == ("sender:2",)
    assert sender.senders == (1, 2)
    assert sender.bounds.capacity == (8 << 20, 8, 8, 8)  # the run's credit capacity
    assert sender.bounds.charges == ((1 << 20, 1, 0, 1),)  # one 1 MiB block, direct path
    # the handshake is gone: the sender's trace starts after its activation, on session 1
    assert (
        sender.events[0]["k"] == "send" and sender.events[0]["msg"]["type"] == "SenderCreditUsage"
    )
    assert sender.events[0]["msg"]["receiver_session_id"] == 1
    assert all(e["n"] == "sender:2" for e in sender.events)  # not the engine's own receiver
    assert {e["vars"]["session"] for e in sender.events if "vars" in e} == {1}
    assert receiver.events[0]["k"] == "accept"  # its first start dropped
    assert isinstance(next(iter(sender.events[1]["msg"]["grants"])), int)  # keys back to ints


def test_the_credit_spec_refuses_the_initial_grant_the_receiver_opens_a_key_with(
    tmp_path: Path,
) -> None:
    convert_incast(FIXTURE, tmp_path)
    report = validate_trace(read_trace(tmp_path / "receiver.cbor"), hidden_depth=2)
    assert not report.ok and report.matched == 2
    assert report.event is not None and report.event["msg"]["type"] == "CapabilityActivation"
    assert [c.reason for c in report.candidates] == [
        "logged granted (1048576, 1, 0, 1), the spec has (0, 0, 0, 0)"
    ]


@pytest.mark.slow
def test_a_recorded_incast_sender_is_drawn_up_to_its_refused_demand_report(tmp_path: Path) -> None:
    out = tmp_path / "traces"
    result = CliRunner().invoke(main, ["trace", "from-incast", str(FIXTURE), str(out)])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(
        main,
        [
            "trace",
            "validate",
            str(out / "sender-2.cbor"),
            "--hidden-depth",
            "2",
            "--html",
            str(tmp_path / "html"),
        ],
    )
    assert result.exit_code == 1
    assert "REJECTED at event 13 (events 0..12 match the spec)" in result.output
    guard = "a demand is reported only for a charge the available credit cannot cover"
    assert guard in result.output
    html = (tmp_path / "html" / "index.html").read_text(encoding="utf-8")
    assert "event 13 (sender:2 send): no spec step produces it" in html
    assert "the spec allows here: reserve(1, 0), return_unused(1, 0)" in html
    assert html.count('class="step arrow send marked"') == 1


def test_a_version_2_run_is_refused_at_its_first_grant_ahead_update(tmp_path: Path) -> None:
    # The engine now selects credit protocol version 2: the receiver grants before any report.
    # The credit spec describes version 1, where a grant answers a report's demand.
    convert_incast(FIXTURE.parent / "incast_v2", tmp_path)
    sender = read_trace(tmp_path / "sender-1.cbor")
    report = validate_trace(sender, hidden_depth=2)
    assert not report.ok and report.matched == 0
    assert report.event is not None and report.event["msg"]["type"] == "ReceiverCreditUpdate"
    assert [c.reason for c in report.candidates] == [
        "no message in flight (or delivered before and duplicated) matches the received one"
    ]
    assert report.allowed == ("report_usage(0, 1)",)  # the report a version 1 grant answers
    assert "REJECTED at event 0 (the first event)" in report.format()


def test_a_folder_without_a_run_or_with_no_credit_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no incast trace"):
        convert_incast(tmp_path, tmp_path / "out")
    shutil.copy(FIXTURE / "sender-1.jsonl", tmp_path / "sender-1.jsonl")
    lines = (tmp_path / "sender-1.jsonl").read_text(encoding="utf-8").splitlines()
    config = json.loads(lines[0])
    config["mode"] = "fixed"
    (tmp_path / "sender-1.jsonl").write_text(
        "\n".join([json.dumps(config), *lines[1:]]) + "\n", encoding="utf-8"
    )
    with pytest.raises(TraceError, match="'fixed' mode has no credit"):
        convert_incast(tmp_path, tmp_path / "out")
    config["mode"], config["senders"] = "credit", "everyone"
    (tmp_path / "sender-1.jsonl").write_text(json.dumps(config) + "\n", encoding="utf-8")
    with pytest.raises(TraceError, match="senders must be peer ids"):
        convert_incast(tmp_path, tmp_path / "out")
    (tmp_path / "sender-1.jsonl").write_text(lines[0] + "\n{not json\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"sender-1.jsonl:2: not JSON"):
        convert_incast(tmp_path, tmp_path / "out")
    result = CliRunner().invoke(main, ["trace", "from-incast", str(tmp_path), str(tmp_path / "o")])
    assert result.exit_code == 1 and "not JSON" in result.output


def test_unreadable_files_get_a_section_of_their_own(tmp_path: Path) -> None:
    junk = tmp_path / "junk.cbor"
    junk.write_bytes(b"\xff\x00")
    result = CliRunner().invoke(main, ["trace", "validate", str(junk), "--html", str(tmp_path)])
    assert result.exit_code == 1 and "UNREADABLE" in result.output
    html = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert "unreadable" in html and "<svg" not in html
