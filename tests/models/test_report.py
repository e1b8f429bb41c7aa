"""Sequence charts of counterexamples (``tent_models.report``): the model's chart hook, the
SVG a designer looks at, and the ``tent check --html`` page.

The known counterexample is the shipped ``credit/bad/delta_grants`` refutation: the sender
adds each update's amounts, so a refresh of the same grant doubles it. Its chart must show the
three lifelines of the credit spec, the six messages as arrows between the right ones, and the
violated invariant highlighted at the last step.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tent_models import configs
from tent_models.checker import CounterExample, TraceStep, ViolationKind, check
from tent_models.cli import main
from tent_models.configs import admission as configs_admission
from tent_models.configs import gated as configs_gated
from tent_models.registry import RunOptions, catalogue, run_target
from tent_models.report import (
    ChartError,
    Placement,
    check_page,
    counterexample_chart,
    lifelines,
    placements,
    svg,
    witness_chart,
    write_html,
)

sys.path.insert(0, str(Path(__file__).parent))
from two_phase import BrokenTwoPhase, TwoPhase

SVG = "{http://www.w3.org/2000/svg}"


def delta_grants() -> tuple[Any, CounterExample]:
    factory = configs.KNOWN_BAD_CONFIGS["delta_grants"]
    result = check(factory())
    (violation,) = [v for v in result.violations if v.name == "sender_grant_within_receiver_grant"]
    return factory(), violation


def parse(text: str) -> ET.Element:
    return ET.fromstring(text)


def groups(root: ET.Element, css: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if css in g.get("class", "").split()]


def texts(element: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in element.iter(f"{SVG}text")]


# --- the known counterexample, drawn ---------------------------------------------------------


def test_the_delta_grants_chart_has_the_lifelines_arrows_and_the_violated_invariant() -> None:
    model, violation = delta_grants()
    root = parse(svg(counterexample_chart(model, violation, ident="dg", title="delta_grants")))
    (head,) = groups(root, "head")
    assert texts(head) == ["sender[0]", "network", "receiver"]
    steps = groups(root, "step")
    assert [s.get("data-step") for s in steps] == ["1", "2", "3", "4", "5", "6"]
    drawn = [(s.get("data-kind"), s.get("data-source"), s.get("data-target")) for s in steps]
    assert drawn == [
        ("send", "sender[0]", "network"),  # report_usage: a usage report with demand
        ("deliver", "network", "receiver"),  # it arrives
        ("send", "receiver", "network"),  # grant: Update #1
        ("deliver", "network", "sender[0]"),  # applied: grant_total (1, 1)
        ("send", "receiver", "network"),  # push_update: the same grant as Update #2
        ("deliver", "network", "sender[0]"),  # added again: (2, 2)
    ]
    for step in steps:  # every message is an arrow with a head, no step is a box
        (line,) = step.iter(f"{SVG}line")
        assert line.get("marker-end", "").startswith("url(#dg-")
        assert not [r for r in step.iter(f"{SVG}rect") if r.get("class") == "frame"]
    assert [s.get("data-step") for s in steps if "marked" in s.get("class", "")] == ["6"]
    assert "Update s1 e1 #2 (1, 1)" in texts(steps[-1])
    (tooltip,) = steps[-1].iter(f"{SVG}title")
    assert "sender[0].ledger.grant_total: (1, 1) -> (2, 2)" in (tooltip.text or "")
    (closing,) = groups(root, "closing")
    lines = texts(closing)
    assert lines[0] == "✗ invariant violated: sender_grant_within_receiver_grant"
    assert any(line.startswith("cites: RFC acceptance 3") for line in lines)
    assert "violation" in closing.get("class", "")


def test_a_user_models_chart_shows_the_values_its_invariant_compared() -> None:
    (violation,) = check(BrokenTwoPhase(2)).violations
    root = parse(svg(counterexample_chart(BrokenTwoPhase(2), violation, ident="t", title="2pc")))
    assert texts(groups(root, "head")[0]) == ["TM", "network", "RM0", "RM1"]
    kinds = [
        (s.get("data-kind"), s.get("data-source"), s.get("data-target"))
        for s in groups(root, "step")
    ]
    assert ("local", "RM0", "") in kinds  # the broken promise: a prepared RM aborts
    assert kinds[-1] == ("deliver", "network", "RM1")  # ... and the other commits
    (closing,) = groups(root, "closing")
    assert "compared: committed=(1,), aborted=(0,)" in texts(closing)


def test_a_witness_trace_is_drawn_and_closed_in_green() -> None:
    (witness,) = check(TwoPhase(2)).witnesses
    chart = witness_chart(TwoPhase(2), witness, ident="w", title="all committed")
    assert chart.closing.kind == "witness"
    assert [r.placement.target for r in chart.rows][-2:] == ["RM0", "RM1"] or [
        r.placement.target for r in chart.rows
    ][-2:] == ["RM1", "RM0"]
    assert "#2b8a3e" in svg(chart)  # the witness colour, not the violation's


# --- the hook -----------------------------------------------------------------------------


def test_a_model_without_the_hook_gets_one_lifeline_and_boxes() -> None:
    class BrokenPlain(BrokenTwoPhase):  # the same model, its hook taken away
        lifelines = None  # type: ignore[assignment]
        locate = None  # type: ignore[assignment]

    (violation,) = check(BrokenPlain(2)).violations
    chart = counterexample_chart(BrokenPlain(2), violation, ident="p", title="plain")
    assert chart.lifelines == ("BrokenPlain",)  # named after the model
    assert {r.placement.kind for r in chart.rows} == {"local"}
    root = parse(svg(chart))
    assert len(groups(root, "box")) == len(violation.actions)
    assert len(list(root.iter(f"{SVG}line"))) == 1  # the lifeline: no arrow


class Hooked(TwoPhase):
    def __init__(self, answer: Any, nodes: Any = ("TM", "network", "RM0", "RM1")) -> None:
        super().__init__(2)
        self.answer, self.nodes = answer, nodes

    def lifelines(self) -> Any:
        return self.nodes

    def locate(self, s: Any, action: str, args: tuple[Hashable, ...]) -> Any:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("answer", "nodes", "message"),
    [
        (("fly", "TM"), ("TM",), "unknown kind 'fly'"),
        (("send", "TM", "moon"), ("TM",), "target 'moon' is not a lifeline"),
        (("local", "RM7"), ("TM",), "source 'RM7' is not a lifeline"),
        (("local", "TM", "RM0"), ("TM", "RM0"), "a local step has no target"),
        (("send",), ("TM",), "must return (kind, source[, target[, label]])"),
        (("local", "TM", None, 3), ("TM",), "the label must be a string"),
        (KeyError("rm_prepare"), ("TM",), "locate() raised KeyError"),
        (("local", "TM"), ("TM", "TM"), "names a node twice"),
        (("local", "TM"), (), "at least one node"),
    ],
)
def test_a_wrong_hook_is_a_chart_error_naming_the_step(
    answer: Any, nodes: Any, message: str
) -> None:
    model = Hooked(answer, nodes)
    state = model.initial_states()[0]
    with pytest.raises(ChartError, match=re.escape(message)):
        placements(model, [state, state], [("rm_prepare", (0,))])


def test_a_trace_that_does_not_replay_is_drawn_on_one_lifeline_with_a_note() -> None:
    model = TwoPhase(2)
    initial = model.describe(model.initial_states()[0])
    violation = CounterExample(
        kind=ViolationKind.INVARIANT,
        name="consistent",
        steps=(
            TraceStep(index=0, action=None, fields=initial),
            TraceStep(index=1, action="tm_commit", fields=initial),
        ),
        actions=(("tm_commit", ()),),  # not enabled: nobody prepared
    )
    chart = counterexample_chart(model, violation, ident="n", title="no replay")
    assert chart.lifelines == ("two_phase",)
    assert "does not replay" in chart.note and "tm_commit()" in chart.note


def test_every_shipped_model_places_every_step_it_takes_on_its_lifelines() -> None:
    models = [
        configs.CONFIGS["credit/tiny"](),
        configs.KNOWN_BAD_CONFIGS["no_write_admission"](),  # the adversarial spec's actions
        configs_gated.CONFIGS["gated/tiny"](),
        configs_admission.CONFIGS["admission/tiny"](),
        configs.CONFIGS["negotiation/tiny"](),
    ]
    for model in models:
        nodes = lifelines(model)
        assert len(nodes) > 1, model.name
        seen: set[str] = set()
        frontier = list(model.initial_states())
        for _depth in range(6):  # the first few levels reach every kind of step
            nxt = []
            for state in frontier[:200]:
                for step in model.successors(state):
                    (place,) = placements(model, [state], [(step.action, tuple(step.args))])
                    assert isinstance(place, Placement)
                    seen.add(step.action)
                    nxt.append(step.state)
            frontier = nxt
        assert len(seen) >= 4, (model.name, seen)


# --- the page ---------------------------------------------------------------------------------

_URL = re.compile(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}", re.IGNORECASE)


def test_the_check_page_is_self_contained_and_links_each_step_to_its_row(tmp_path: Path) -> None:
    (target,) = [t for t in catalogue() if t.name == "credit/bad/delta_grants"]
    outcome = run_target(target, RunOptions())
    page = write_html(tmp_path, check_page([outcome], 1.0, title="tent check"))
    html = page.read_text(encoding="utf-8")
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert _URL.findall(html.replace('xmlns="http://www.w3.org/2000/svg"', "")) == []
    assert 'href="#t-credit-bad-delta_grants"' in html  # the summary row links its section
    first = "credit-bad-delta_grants-v1"  # the refuting counterexample comes first
    for step in range(1, 7):
        assert f'<a href="#{first}-step-{step}">' in html  # the chart's step ...
        assert f'<tr id="{first}-step-{step}"' in html  # ... and its row
    assert "invariant violated: sender_grant_within_receiver_grant" in html


def test_a_refutations_page_draws_the_refuting_counterexample_first(tmp_path: Path) -> None:
    # The checker finds sender_never_overdraws first; the variant is refuted by the other.
    (target,) = [t for t in catalogue() if t.name == "credit/bad/no_decreasing_grant_check"]
    outcome = run_target(target, RunOptions())
    assert outcome.result is not None
    assert outcome.result.violations[0].name == "sender_never_overdraws"
    html = write_html(tmp_path, check_page([outcome], 1.0, title="t")).read_text("utf-8")
    first, second = (
        html.index(f"<h3>invariant violated: {name}</h3>")
        for name in ("old_update_cannot_raise_credit", "sender_never_overdraws")
    )
    assert first < second


@pytest.mark.slow
def test_tent_check_html_and_itf_write_the_page_and_the_traces(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "check",
            "--only",
            "credit/bad/*",
            "--no-progress",
            "--html",
            str(tmp_path / "html"),
            "--itf",
            str(tmp_path / "itf"),
        ],
    )
    assert result.exit_code == 0, result.output
    html = (tmp_path / "html" / "index.html").read_text(encoding="utf-8")
    assert html.count('<section id="t-credit-bad-') == 11  # one per credit known-bad variant
    assert html.count("<svg ") >= 11
    written = sorted(p.name for p in (tmp_path / "itf").iterdir())
    assert (
        "credit-bad-delta_grants.invariant-sender_grant_within_receiver_grant.itf.json" in written
    )


def test_tent_check_html_refuses_a_file_as_the_folder_before_running(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = CliRunner().invoke(
        main, ["check", "--only", "credit/bad/delta_grants", "--html", str(blocker / "sub")]
    )
    assert result.exit_code == 2
    assert "is not a folder" in result.output
