"""ITF (the Informal Trace Format of Apalache and Quint): counterexamples out, traces in.

The reader is checked against the format's own published example: the ADR-015 trace of
Apalache's MissionariesAndCannibals counterexample, validated against a Python model of that
TLA+ specification. The fixture is the ADR's JSON block, copied unchanged from
https://github.com/apalache-mc/apalache/blob/bf6c58f9ba810636c07a0221dcbfd60c8d24f789/docs/src/adr/015adr-trace.md
(section "Example"; ``fixtures/itf/SOURCE.md`` says the same).
"""

from __future__ import annotations

import json
import re
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from click.testing import CliRunner
from tent_models import Model, action, configs
from tent_models.checker import check
from tent_models.checker._result import ABSENT
from tent_models.cli import main
from tent_models.report import (
    ItfError,
    canonical,
    decode,
    encode,
    itf_chart,
    read_itf,
    svg,
    validate_itf,
)

FIXTURE = Path(__file__).parent / "fixtures" / "itf" / "MissionariesAndCannibals.itf.json"


class Point(NamedTuple):
    x: int
    y: int


# --- values ---------------------------------------------------------------------------------


def test_values_are_written_as_the_adr_says() -> None:
    assert encode(2**53 - 1) == 2**53 - 1
    assert encode(2**53) == {"#bigint": str(2**53)}
    assert encode(-(2**64)) == {"#bigint": str(-(2**64))}
    assert encode((1, "a", True)) == {"#tup": [1, "a", True]}
    assert encode(Point(1, 2)) == {"x": 1, "y": 2}
    assert encode(frozenset({3, 1, 2})) == {"#set": [1, 2, 3]}
    assert encode({(1, 2): "p"}) == {"#map": [[{"#tup": [1, 2]}, "p"]]}
    assert encode({"a": (1,)}) == {"a": {"#tup": [1]}}
    assert encode(None) == {"#unserializable": "None"}
    assert encode(ABSENT) == {"#unserializable": ABSENT}


def test_the_normal_form_equates_what_the_adr_leaves_to_the_tool() -> None:
    assert canonical({"#bigint": "7"}) == canonical(7)
    assert canonical([1, 2]) == canonical({"#tup": [1, 2]})
    assert canonical({"#set": [2, 1]}) == canonical({"#set": [1, 2]})
    assert canonical({"E": 1, "W": 2}) == canonical({"#map": [["W", 2], ["E", 1]]})
    assert canonical(True) != canonical(1)
    assert canonical("1") != canonical(1)
    assert canonical({"#set": [1]}) != canonical([1])


def test_decode_inverts_encode_for_action_arguments() -> None:
    args = (0, (1, 1, 0), frozenset({1, 2}), "x", 2**70)
    assert decode(encode(args)) == args


# --- reading ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("[]", "a JSON object"),
        ("{", "not JSON"),
        ('{"vars": ["x"]}', "states must be a non-empty list"),
        ('{"vars": "x", "states": [{}]}', "vars must be a list of strings"),
        ('{"vars": ["x", "x"], "states": [{"x": 1}]}', "names a variable twice"),
        ('{"vars": ["x"], "states": [{"y": 1}]}', "state 0 does not define x"),
        ('{"vars": ["x"], "states": [{"x": 1.5}]}', "not an integer"),
        ('{"vars": ["x"], "states": [{"x": {"#bag": []}}]}', "unknown or mixed ITF tag"),
        ('{"vars": ["x"], "states": [{"x": {"#bigint": "1e3"}}]}', "string of digits"),
        ('{"vars": ["x"], "states": [{"x": {"#map": [[1]]}}]}', "a [key, value] pair"),
        ('{"vars": ["x"], "states": [{"x": 1}], "loop": 1}', "not the index of a state"),
        ('{"vars": ["x"], "states": [{"x": 1, "#meta": 3}]}', "#meta must be an object"),
        ('{"params": ["N"], "vars": ["x"], "states": [{"x": 1}]}', "state 0 does not define N"),
        ('{"vars": ["x"], "states": [{"x": ' + "[" * 100_000 + "]" * 100_000 + "}]}", "deeply"),
    ],
)
def test_a_malformed_trace_is_an_itf_error(doc: str, message: str) -> None:
    with pytest.raises(ItfError, match=re.escape(message)):
        read_itf(doc)


# --- the ADR's own example, against a model of its specification ------------------------------

PEOPLE = ("c1_OF_PERSON", "c2_OF_PERSON", "m1_OF_PERSON", "m2_OF_PERSON")
CANNIBALS = frozenset(p for p in PEOPLE if p.startswith("c"))


class Banks(NamedTuple):
    bank_of_boat: str
    who_is_on_bank: tuple[tuple[str, frozenset[str]], ...]  # (("E", {...}), ("W", {...}))


def _safe(group: frozenset[str]) -> bool:
    # IsSafe(S) == S \subseteq Cannibals \/ Cardinality(S \cap C) =< Cardinality(S \cap M)
    return group <= CANNIBALS or len(group & CANNIBALS) <= len(group - CANNIBALS)


def _moves(model: MissionariesAndCannibals, s: Banks) -> Iterator[tuple[frozenset[str]]]:
    here = dict(s.who_is_on_bank)[s.bank_of_boat]
    people = sorted(here)
    for i, first in enumerate(people):
        yield (frozenset({first}),)
        for second in people[i + 1 :]:
            yield (frozenset({first, second}),)


class MissionariesAndCannibals(Model[Banks]):
    """Apalache's ``MissionariesAndCannibalsTyped.tla`` with two of each, in Python."""

    name = "missionaries_and_cannibals"

    def initial_states(self) -> list[Banks]:
        return [Banks("E", (("E", frozenset(PEOPLE)), ("W", frozenset())))]

    @action(over=_moves)
    def move(self, s: Banks, group: frozenset[str]) -> Banks | None:
        b = s.bank_of_boat
        other = "W" if b == "E" else "E"
        banks = dict(s.who_is_on_bank)
        this, there = banks[b] - group, banks[other] | group
        if not (1 <= len(group) <= 2 and group <= banks[b] and _safe(this) and _safe(there)):
            return None
        return Banks(other, tuple(sorted({b: this, other: there}.items())))

    def describe(self, s: Banks) -> dict[str, object]:
        return {"bank_of_boat": s.bank_of_boat, "who_is_on_bank": dict(s.who_is_on_bank)}

    def lifelines(self) -> tuple[str, ...]:
        return ("E", "W")

    def locate(self, s: Banks, action: str, args: tuple[Hashable, ...]) -> tuple[str, ...]:
        other = "W" if s.bank_of_boat == "E" else "E"
        (group,) = args
        assert isinstance(group, frozenset)
        return ("send", s.bank_of_boat, other, " + ".join(sorted(p[:2] for p in group)))


def test_the_adr_example_is_read_and_is_a_run_of_the_specification() -> None:
    trace = read_itf(FIXTURE)
    assert trace.vars == ("bank_of_boat", "who_is_on_bank")
    assert len(trace.states) == 6 and trace.state_meta[5] == {"index": 5}
    assert trace.meta["source"] == "MC_MissionariesAndCannibalsTyped.tla"
    report = validate_itf(trace, MissionariesAndCannibals(), path="adr")
    assert report.ok, report.format()
    assert report.format() == "adr: valid ITF trace (6 states)"
    first_move = report.path[0][1]
    assert first_move == (frozenset({"c2_OF_PERSON", "m2_OF_PERSON"}),)
    chart = itf_chart(trace, MissionariesAndCannibals(), report, ident="mc", title="adr")
    assert chart.lifelines == ("E", "W")
    sides = [(r.placement.source, r.placement.target) for r in chart.rows]
    assert sides == [("E", "W"), ("W", "E")] * 2 + [("E", "W")]
    assert 'data-kind="send"' in svg(chart)


def test_a_state_the_specification_does_not_allow_is_rejected_with_the_closest_step() -> None:
    doc = json.loads(FIXTURE.read_text(encoding="utf-8"))
    # State 1 sends both missionaries west and leaves the cannibals with no one: allowed.
    # State 2 brings one missionary back alone, leaving m2 with c2 - but we move c2 instead:
    doc["states"][2]["who_is_on_bank"] = {
        "#map": [
            ["E", {"#set": ["c1_OF_PERSON", "c2_OF_PERSON", "m1_OF_PERSON"]}],
            ["W", {"#set": ["m2_OF_PERSON"]}],
        ]
    }
    report = validate_itf(read_itf(json.dumps(doc)), MissionariesAndCannibals(), path="bad")
    assert not report.ok and report.matched == 2
    assert report.format().startswith("bad: REJECTED at state 2 (states 0..1 match the model)")
    assert report.closest.startswith("move(")
    assert [v for v, _m, _t in report.differences] == ["who_is_on_bank"]


# --- round trip: tent check --itf, then tent trace validate ---------------------------------


def delta_grants_itf(tmp_path: Path) -> Path:
    result = CliRunner().invoke(
        main,
        ["check", "--only", "credit/bad/delta_grants", "--no-progress", "--itf", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    return (
        tmp_path / "credit-bad-delta_grants.invariant-sender_grant_within_receiver_grant.itf.json"
    )


def test_a_counterexample_written_as_itf_reads_back_as_the_same_trace(tmp_path: Path) -> None:
    path = delta_grants_itf(tmp_path)
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["#meta"]["format"] == "ITF"
    assert doc["#meta"]["tent"]["property"] == "sender_grant_within_receiver_grant"
    assert [s["#meta"].get("action") for s in doc["states"]] == [
        None,
        "report_usage",
        "deliver",
        "grant",
        "deliver",
        "push_update",
        "deliver",
    ]
    trace = read_itf(path)
    model = configs.KNOWN_BAD_CONFIGS["delta_grants"]()
    (violation,) = [
        v for v in check(model).violations if v.name == doc["#meta"]["tent"]["property"]
    ]
    for step, state in zip(violation.steps, trace.states, strict=True):  # every state, every field
        assert {k: canonical(v) for k, v in state.items()} == {
            k: canonical(encode(v)) for k, v in step.fields.items()
        }
    report = validate_itf(trace, configs.KNOWN_BAD_CONFIGS["delta_grants"]())
    assert report.ok and report.path == tuple((a, tuple(g)) for a, g in violation.actions)


def test_tent_trace_validate_reads_itf_and_names_the_refusing_guard(tmp_path: Path) -> None:
    path = delta_grants_itf(tmp_path)
    ok = CliRunner().invoke(main, ["trace", "validate", str(path)])
    assert ok.exit_code == 0, ok.output
    assert "valid ITF trace (7 states)" in ok.output
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["states"][5]["#meta"]["args"] = {"#tup": [1]}  # push_update of a sender that is not there
    forged = tmp_path / "forged.itf.json"
    forged.write_text(json.dumps(doc), encoding="utf-8")
    bad = CliRunner().invoke(
        main, ["trace", "validate", str(forged), "--html", str(tmp_path / "html")]
    )
    assert bad.exit_code == 1
    assert "REJECTED at state 5 (states 0..4 match the model)" in bad.output
    assert "recorded step: push_update(1)" in bad.output
    assert "refused: push_update: the first argument must be a sender index, got 1" in bad.output
    assert "closest model step: push_update(0), which reaches that state" in bad.output
    html = (tmp_path / "html" / "index.html").read_text(encoding="utf-8")
    assert "state 5: no step of the model leads to state 5" in html
    assert 'class="step arrow send marked"' in html  # the refused step, on its lifelines


def test_an_itf_trace_that_names_no_model_needs_model(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["trace", "validate", str(FIXTURE)])
    assert result.exit_code == 1
    assert "names no model: pass --model MODULE:FACTORY" in result.output


def test_tent_trace_validate_takes_a_user_model_for_a_foreign_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    result = CliRunner().invoke(
        main,
        ["trace", "validate", str(FIXTURE), "--model", "test_report_itf:MissionariesAndCannibals"],
    )
    assert result.exit_code == 0, result.output
    assert "valid ITF trace (6 states)" in result.output


def test_a_foreign_traces_values_decode_to_python_values() -> None:
    trace = read_itf(FIXTURE)
    assert decode(trace.states[0]["who_is_on_bank"]) == {"E": frozenset(PEOPLE), "W": frozenset()}
