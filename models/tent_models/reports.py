"""The ``--json`` and ``--junit`` reports of ``tent check`` (one entry per target, run order)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

from tent_models.checker import CheckResult
from tent_models.registry import Outcome

__all__ = ["json_report", "junit_report"]


def _plain(value: object) -> Any:
    """A JSON-safe copy of a trace value (tuples become lists; anything exotic its repr)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return repr(value)


def _violations(result: CheckResult | None) -> list[dict[str, Any]]:
    if result is None:
        return []
    return [
        {
            "kind": v.kind.value,
            "name": v.name,
            "cites": v.cites,
            "detail": v.detail,
            "compared": {key: _plain(value) for key, value in v.compared.items()},
            "actions": [[action, _plain(args)] for action, args in v.actions],
        }
        for v in result.violations
    ]


def json_report(outcomes: Sequence[Outcome], seconds: float, *, mode: str) -> dict[str, Any]:
    """The ``--json`` document: totals, then one object per target in run order.

    Each target object has ``name``, ``kind``, ``tier``, ``passed``, ``result`` (the verdict),
    ``seconds``, the counts (``null`` for proofs), ``message``, ``counterexample`` (the printed
    text or ``null``), ``violations`` (kind, name, cites, detail, the values a violated
    invariant ``compared`` and the replayable ``[action, args]`` list of each), and for a model
    check ``coverage`` (per action: ``enabled``, ``fired``, ``new_states``,
    ``declared_unreachable``) and ``witnesses`` (``name``, ``satisfied``, ``steps`` to the first
    state that meets it), ``null`` for other targets.
    """
    failed = sum(not o.passed for o in outcomes)
    return {
        "mode": mode,
        "ok": failed == 0,
        "seconds": round(seconds, 3),
        "passed": len(outcomes) - failed,
        "failed": failed,
        "targets": [
            {
                "name": o.target,
                "kind": o.kind.value,
                "tier": o.tier.value,
                "passed": o.passed,
                "result": o.verdict,
                "seconds": round(o.seconds, 3),
                "states": o.states,
                "transitions": o.transitions,
                "depth": o.depth,
                "states_per_second": None
                if o.states_per_second is None
                else round(o.states_per_second, 1),
                "message": o.message,
                "counterexample": o.report or None,
                "violations": _violations(o.result),
                "coverage": None
                if o.result is None
                else [
                    {
                        "action": c.action,
                        "enabled": c.enabled,
                        "fired": c.fired,
                        "new_states": c.new_states,
                        "declared_unreachable": c.declared_unreachable,
                    }
                    for c in o.result.coverage
                ],
                "witnesses": None
                if o.result is None
                else [
                    {"name": w.name, "satisfied": w.satisfied, "steps": max(len(w.steps) - 1, 0)}
                    for w in o.result.witnesses
                ],
            }
            for o in outcomes
        ],
    }


def junit_report(outcomes: Sequence[Outcome], seconds: float, *, name: str) -> str:
    """The ``--junit`` document: one ``testcase`` per target (``classname`` ``tent.<kind>``).

    A failed target carries a ``failure`` element (an ``error`` element when it raised) whose
    ``message`` is the verdict and one-line reason and whose text is the counterexample.
    """
    failures = sum(not o.passed and o.verdict != "error" for o in outcomes)
    errors = sum(o.verdict == "error" for o in outcomes)
    counts = {
        "name": name,
        "tests": str(len(outcomes)),
        "failures": str(failures),
        "errors": str(errors),
        "time": f"{seconds:.3f}",
    }
    root = ET.Element("testsuites", counts)
    suite = ET.SubElement(root, "testsuite", counts)
    for o in outcomes:
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": f"tent.{o.kind.value}", "name": o.target, "time": f"{o.seconds:.3f}"},
        )
        summary = o.verdict + (f": {o.message}" if o.message else "")
        if not o.passed:
            element = "error" if o.verdict == "error" else "failure"
            failure = ET.SubElement(case, element, {"message": summary, "type": o.verdict})
            failure.text = o.report or o.message
        else:
            out = ET.SubElement(case, "system-out")
            out.text = summary if o.states is None else f"{summary}, {o.states:,} states"
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
