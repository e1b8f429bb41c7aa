"""The mutation benchmark in a tiny mode: one mutant it must kill, one equivalent it must not.

Runs the real machinery (a copy of the repository, the coverage map of a one-file suite,
per-mutant test selection, the two-stage run) on two hand-made mutants of the ledger, and checks
that the checkout is left as it was.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "tent_benchmarks_mutants_tiny", ROOT / "benchmarks" / "mutants.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _status() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


@pytest.mark.slow
def test_a_tiny_run_kills_the_real_fault_and_lists_the_equivalent_survivor() -> None:
    mutants = _load()
    from tent_mutants import runner  # on sys.path once benchmarks/mutants.py is loaded

    killable = next(m for m in mutants.MUTANTS if m.name == "equal_sequence_is_new")
    # `max_entries < 1` and `max_entries <= 0` agree on every int: no test can kill it.
    equivalent = mutants.Mutant(
        name="max_entries_le_zero",
        rule="an equivalent rewrite of the max_entries check",
        defect=mutants.DefectClass.BOUNDARY_FLIP,
        edits=(
            mutants.Edit(
                file="tent_credit/_ledger.py",
                old="if type(max_entries) is not int or max_entries < 1:",
                new="if type(max_entries) is not int or max_entries <= 0:",
            ),
        ),
    )
    before = _status()
    ledger = (ROOT / "tent_credit/_ledger.py").read_text(encoding="utf-8")
    report = runner.run(ROOT, [killable, equivalent], suite=["tests/credit/test_ledger.py"], jobs=1)
    assert _status() == before
    assert (ROOT / "tent_credit/_ledger.py").read_text(encoding="utf-8") == ledger

    by_name = {m["ident"]: m for m in report["mutants"]}
    killed = by_name["equal_sequence_is_new"]
    assert killed["outcome"] == "killed" and killed["by_suite"]
    assert not killed["by_conformance"]  # the one-file suite has no conformance test
    assert killed["killed_by"].startswith("tests/credit/test_ledger.py::")
    assert 0 < killed["selected"] < report["coverage"]["tests"]  # a selection, not the suite

    survivor = by_name["max_entries_le_zero"]
    assert survivor["outcome"] == "survived" and survivor["selected"] > 0
    line = ledger[: ledger.index("max_entries < 1")].count("\n") + 1
    assert report["survivors"] == [
        {
            "mutant": "max_entries_le_zero",
            "kind": "semantic",
            "where": f"tent_credit/_ledger.py:{line}",
            "mutation": "an equivalent rewrite of the max_entries check",
            "outcome": "survived",
            "selected_tests": survivor["selected"],
        }
    ]
    assert report["semantic"]["kill_rate_suite"] == 0.5
    assert report["semantic"]["kill_rate_conformance"] == 0.0
