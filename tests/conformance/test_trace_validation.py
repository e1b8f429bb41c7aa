"""Trace recording (the implementation's hook) and trace validation against the credit spec.

Valid traces come from the differential runs (whole-system, per-node and partial); corrupted
ones are hand-edited copies that must be rejected at the edited event, with the guard that
fails. The golden traces under ``traces/`` are regenerated and compared byte for byte.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import cbor2
import pytest
from click.testing import CliRunner
from tent_models.conformance.credit import (
    CONFORMANCE_BOUNDS,
    CreditRun,
    credit_lockstep,
    run_credit_conformance,
)
from tent_models.trace import (
    TraceError,
    TraceRecorder,
    TraceReport,
    read_trace,
    trace_cli,
    validate,
    validate_trace,
)
from tent_spec.credit import Activation, Update, Usage

from tent_credit import CreditCharge, CreditResource, SenderEndpoint
from tent_credit._trace import message_fields

TRACES = Path(__file__).parent / "traces"
SENDERS = (1, 2)
NO_FORGERY = frozenset({"publish_regressed"})  # the harness forges that update, not the receiver


def _recorded(seed: int, steps: int, **filters: Any) -> TraceRecorder:
    recorder = TraceRecorder(CONFORMANCE_BOUNDS, senders=SENDERS, **filters)
    divergence = run_credit_conformance(steps=steps, seed=seed, trace=recorder, exclude=NO_FORGERY)
    assert divergence is None, divergence.format()
    return recorder


def _check(recorder: TraceRecorder) -> TraceReport:
    return validate_trace(read_trace(recorder.dumps()))


# --- valid traces -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_whole_system_traces_of_differential_runs_validate(seed: int) -> None:
    recorder = _recorded(seed, 80)
    report = _check(recorder)
    assert report.ok, report.format()
    assert report.matched == report.events == len(recorder.events) > 50


@pytest.mark.parametrize("node", ["receiver", "sender:1", "sender:2"])
def test_per_node_traces_validate_with_the_rest_as_environment(node: str) -> None:
    recorder = _recorded(0, 80, nodes=(node,))
    assert {e["n"] for e in recorder.events} == {node}
    report = _check(recorder)
    assert report.ok, report.format()
    assert report.hidden_steps > 0  # the other nodes' steps were inferred


def test_partial_traces_validate_with_unlogged_variables_and_event_kinds() -> None:
    # the receiver logs only its sends with the granted totals: receives are stuttering
    recorder = _recorded(2, 40, nodes=("receiver",), kinds=("send",), logged=("granted",))
    assert {e["k"] for e in recorder.events} == {"send"}
    assert all(set(e.get("vars", {})) <= {"epoch", "granted"} for e in recorder.events)
    report = _check(recorder)
    assert report.ok, report.format()
    # every node, but no receive events and only the grant totals logged
    recorder = _recorded(0, 60, kinds=("send", "reserve", "commit", "land", "start", "accept"))
    assert "receive" not in {e["k"] for e in recorder.events}
    assert _check(recorder).ok
    recorder = _recorded(0, 60, logged=("grant_total", "granted"))
    assert _check(recorder).ok


# --- corrupted traces ----------------------------------------------------------------------------


def _scripted(steps: list[tuple[str, tuple[Any, ...]]]) -> tuple[CreditRun, TraceRecorder]:
    recorder = TraceRecorder(CONFORMANCE_BOUNDS, senders=SENDERS)
    run = credit_lockstep(CONFORMANCE_BOUNDS, trace=recorder)
    for action, args in steps:
        verdict = run.step(action, args)
        assert str(verdict) in ("applied", "refused"), verdict
    return run, recorder


GRANTED = [
    ("report_usage", (0, 1)),
    ("deliver", (0, Usage(2, 1, 1, 1, (0, 0), 1))),
    ("deliver", (0, Update(1, 1, 1, 1, (1, 1)))),
    ("reserve", (0, 0)),
]


def _index(recorder: TraceRecorder, node: str, kind: str) -> int:
    return next(i for i, e in enumerate(recorder.events) if e["n"] == node and e["k"] == kind)


def _rejected(events: list[dict[str, Any]]) -> TraceReport:
    recorder = TraceRecorder(CONFORMANCE_BOUNDS, senders=SENDERS)
    recorder.events = events
    report = _check(recorder)
    assert not report.ok
    return report


def test_a_minted_grant_is_rejected_at_the_receive_that_shows_it() -> None:
    _run, recorder = _scripted(GRANTED)
    events = copy.deepcopy(recorder.events)
    i = _index(recorder, "sender:1", "receive")
    events[i]["msg"]["grants"] = {1: 2, 2: 2}
    events[i]["vars"]["grant_total"] = {1: 2, 2: 2, 3: 0, 4: 0}
    report = _rejected(events)
    assert report.matched == i
    assert report.event is not None and report.event["msg"]["grants"] == {1: 2, 2: 2}
    assert [c.action for c in report.candidates] == ["deliver"]
    assert "no message in flight" in report.candidates[0].reason
    assert report.state_before is not None
    assert report.state_before["sender[0].to_sender"] == (
        ("Update(session=1, epoch=1, seq=1, grants=(1, 1))", 1),
    )


def test_a_token_reused_after_the_fence_is_rejected_with_the_failing_guard() -> None:
    _run, recorder = _scripted(
        [
            *GRANTED,
            ("receiver_restart", ()),
            ("send_activation", (0,)),
            ("deliver", (0, Activation(0, 2, 1))),
        ]
    )
    events = copy.deepcopy(recorder.events)
    reserve = events[_index(recorder, "sender:1", "reserve")]
    forged = {**copy.deepcopy(reserve), "k": "commit", "token": reserve["token"]}
    forged["vars"] = events[-1]["vars"]  # the fresh entry of session 2
    events.append(forged)
    report = _rejected(events)
    assert report.matched == len(events) - 1
    (commit,) = report.candidates
    assert (commit.action, commit.args) == ("commit", (0, 0))
    assert "no RESERVED token with this charge in the sender's current entry" in commit.reason


def test_a_reserve_beyond_the_credit_is_rejected_with_the_failing_guard() -> None:
    _run, recorder = _scripted(GRANTED)
    events = copy.deepcopy(recorder.events)
    events.append(copy.deepcopy(events[_index(recorder, "sender:1", "reserve")]))
    events[-1]["vars"]["consumed"] = {1: 2, 2: 2, 3: 0, 4: 0}
    report = _rejected(events)
    assert report.matched == len(events) - 1
    (reserve,) = report.candidates
    assert (reserve.action, reserve.args) == ("reserve", (0, 0))
    assert "insufficient credit in some charged resource" in reserve.reason
    assert "REJECTED at event" in report.format()


def test_a_logged_variable_that_disagrees_is_named() -> None:
    _run, recorder = _scripted(GRANTED)
    events = copy.deepcopy(recorder.events)
    i = _index(recorder, "sender:1", "reserve")
    events[i]["vars"]["consumed"] = {1: 1, 2: 0}  # half a charge: not what reserve does
    report = _rejected(events)
    assert report.matched == i
    assert "logged consumed (1, 0), the spec has (1, 1)" in report.candidates[0].reason


# --- the format, the hook, the command ----------------------------------------------------------


def test_the_format_is_a_versioned_cbor_sequence() -> None:
    _run, recorder = _scripted(GRANTED)
    data = recorder.dumps()
    header = cbor2.loads(data[: len(cbor2.dumps(recorder.header(), canonical=True))])
    assert header["v"] == 1 and header["kind"] == "tent-credit-trace"
    assert header["senders"] == [1, 2]
    trace = read_trace(data)
    assert trace.bounds == CONFORMANCE_BOUNDS
    assert list(trace.events) == recorder.events
    wrong = cbor2.dumps({**recorder.header(), "v": 2}, canonical=True)
    with pytest.raises(TraceError, match="version 2"):
        read_trace(wrong)
    with pytest.raises(TraceError, match="missing header"):
        read_trace(b"")
    with pytest.raises(TraceError, match="unknown node"):
        TraceRecorder(CONFORMANCE_BOUNDS, senders=SENDERS, nodes=("sender:9",))


def test_the_recorder_starts_at_the_specs_initial_state() -> None:
    recorder = TraceRecorder(CONFORMANCE_BOUNDS, senders=SENDERS)
    credit_lockstep(CONFORMANCE_BOUNDS, trace=recorder)
    assert recorder.events == []  # the handshake of the setup is before the initial state


def test_tracing_does_not_change_what_the_implementation_does() -> None:
    plain = credit_lockstep(CONFORMANCE_BOUNDS)
    traced = credit_lockstep(
        CONFORMANCE_BOUNDS, trace=TraceRecorder(CONFORMANCE_BOUNDS, senders=SENDERS)
    )
    for action, args in GRANTED:
        plain.step(action, args)
        traced.step(action, args)
    assert plain.adapter.abstract() == traced.adapter.abstract()


def test_an_endpoint_reports_each_visible_event_to_its_sink() -> None:
    calls: list[tuple[str, str]] = []

    class Sink:
        def record(self, node: str, kind: str, fields: Any) -> None:
            calls.append((node, kind))

    sender = SenderEndpoint(sender_peer=7, trace=Sink())
    sender.connect(0)
    sender.messages_to_send(0)
    charge = CreditCharge.of({CreditResource.DATA_BYTES: 1})
    sender.try_reserve(charge, 1)
    assert calls == [("sender:7", "start"), ("sender:7", "send"), ("sender:7", "reserve")]


def test_message_fields_are_plain_values() -> None:
    update = Update(1, 1, 1, 1, (1, 1))
    assert update.grants == (1, 1)
    from tent_credit import ReceiverCreditUpdate, SessionId
    from tent_credit._types import CreditAmount

    message = ReceiverCreditUpdate(
        qos_class=0,
        receiver_session_id=SessionId(5),
        epoch=2,
        sequence=3,
        grants=(CreditAmount(resource=CreditResource.DATA_BYTES, amount=4),),
    )
    fields = message_fields(message)
    assert fields["type"] == "ReceiverCreditUpdate"
    assert fields["receiver_session_id"] == 5 and fields["grants"] == {1: 4}
    assert cbor2.loads(cbor2.dumps(fields)) == fields


GOLDEN: dict[str, tuple[int, int, dict[str, Any]]] = {  # name: (seed, steps, recorder filters)
    "whole_system.cbor": (0, 60, {}),
    "receiver.cbor": (0, 60, {"nodes": ("receiver",)}),
    "sender_1.cbor": (0, 60, {"nodes": ("sender:1",)}),
    "receiver_sends_partial.cbor": (
        2,
        40,
        {"nodes": ("receiver",), "kinds": ("send",), "logged": ("granted",)},
    ),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_traces_are_current(name: str) -> None:
    # after a deliberate change: python -c "from tests.conformance.test_trace_validation
    # import regenerate; regenerate()" from the repository root
    seed, steps, filters = GOLDEN[name]
    assert (TRACES / name).read_bytes() == _recorded(seed, steps, **filters).dumps()


def regenerate() -> None:
    """Rewrite the golden traces (run after a deliberate change of the format or the hook)."""
    TRACES.mkdir(exist_ok=True)
    for name, (seed, steps, filters) in GOLDEN.items():
        _recorded(seed, steps, **filters).write(TRACES / name)


def test_trace_validate_command_accepts_the_golden_traces(tmp_path: Path) -> None:
    files = [str(TRACES / name) for name in sorted(GOLDEN)]
    result = CliRunner().invoke(trace_cli, ["validate", *files])
    assert result.exit_code == 0, result.output
    assert result.output.count(": valid (") == len(GOLDEN)
    assert validate(files[:1]).ok


def test_trace_validate_command_exits_non_zero_on_a_rejected_trace(tmp_path: Path) -> None:
    _run, recorder = _scripted(GRANTED)
    recorder.events.append(copy.deepcopy(recorder.events[_index(recorder, "sender:1", "reserve")]))
    path = tmp_path / "forged.cbor"
    recorder.write(path)
    result = CliRunner().invoke(trace_cli, ["validate", str(path)])
    assert result.exit_code == 1
    assert "REJECTED at event 5" in result.output
    assert "insufficient credit" in result.output
    bad = tmp_path / "bad.cbor"
    bad.write_bytes(b"\xff")
    result = CliRunner().invoke(trace_cli, ["validate", str(bad)])
    assert result.exit_code == 1 and f"{bad}: UNREADABLE: not a CBOR sequence" in result.output


def test_trace_validate_goes_on_past_unreadable_files_and_names_each(tmp_path: Path) -> None:
    bad, missing = tmp_path / "bad.cbor", tmp_path / "missing.cbor"
    bad.write_bytes(b"\xff")
    good = str(TRACES / sorted(GOLDEN)[0])
    result = CliRunner().invoke(trace_cli, ["validate", str(bad), str(missing), good])
    assert result.exit_code == 1
    assert f"{bad}: UNREADABLE" in result.output
    assert f"{missing}: UNREADABLE: No such file or directory" in result.output
    assert f"{good}: valid (" in result.output  # validated after the two bad ones
    assert "2 of 3 trace(s) unreadable or rejected" in result.output
