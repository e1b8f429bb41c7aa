"""The mutant list of ``benchmarks/mutants.py`` still applies to the current sources.

Fast: no suite is run here. Every snippet must match exactly once (so the list cannot rot
silently), every mutant must change something and break a rule of its own.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "tent_benchmarks_mutants", ROOT / "benchmarks" / "mutants.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # attrs resolves the module of its classes
    spec.loader.exec_module(module)
    return module


mutants = _load()
NAMES = [m.name for m in mutants.MUTANTS]


def test_there_are_at_least_40_mutants_with_distinct_names_and_rules() -> None:
    assert len(mutants.MUTANTS) >= 40
    assert len(set(NAMES)) == len(NAMES)
    assert len({m.rule for m in mutants.MUTANTS}) == len(mutants.MUTANTS)


def test_every_defect_class_of_issue_10_has_mutants_in_both_cores() -> None:
    by_class: dict[object, list[object]] = {}
    for m in mutants.MUTANTS:
        by_class.setdefault(m.defect, []).append(m)
    assert set(by_class) == set(mutants.DefectClass)
    # the four classes item 19 names, several instances each
    for name in ("BOUNDARY_FLIP", "VALIDATE_AFTER_MUTATE", "WRONG_KEY", "MISSING_BOUND"):
        assert len(by_class[mutants.DefectClass[name]]) >= 3, name
    files = {e.file.split("/")[0] for m in mutants.MUTANTS for e in m.edits}
    assert files == {"tent_credit", "tent_sched"}


@pytest.mark.parametrize("name", NAMES)
def test_every_snippet_matches_exactly_once_in_the_current_sources(name: str) -> None:
    mutant = next(m for m in mutants.MUTANTS if m.name == name)
    assert mutant.edits
    for edit in mutant.edits:
        assert edit.old != edit.new
        assert (ROOT / edit.file).read_text(encoding="utf-8").count(edit.old) == 1, edit.old


@pytest.mark.parametrize("name", NAMES)
def test_applying_a_mutant_changes_only_its_files_and_still_compiles(
    name: str, tmp_path: Path
) -> None:
    mutant = next(m for m in mutants.MUTANTS if m.name == name)
    files = sorted({e.file for e in mutant.edits})
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, tmp_path / f)
    mutants.apply_mutant(tmp_path, mutant)
    for f in files:
        text = (tmp_path / f).read_text(encoding="utf-8")
        assert text != (ROOT / f).read_text(encoding="utf-8")
        compile(text, f, "exec")  # a mutant is a semantic fault, never a syntax error


def test_a_snippet_that_no_longer_matches_fails_loudly_and_writes_nothing(
    tmp_path: Path,
) -> None:
    target = tmp_path / "m.py"
    original = "a = 1\nx = 1\nx = 1\n"
    target.write_text(original, encoding="utf-8")
    twice = mutants.Mutant(
        name="twice",
        rule="r",
        defect=mutants.DefectClass.WRONG_RULE,
        edits=(
            mutants.Edit(file="m.py", old="a = 1", new="a = 2"),  # applies
            mutants.Edit(file="m.py", old="x = 1", new="x = 2"),  # matches twice
        ),
    )
    with pytest.raises(mutants.MutantRotError):
        mutants.apply_mutant(tmp_path, twice)
    assert target.read_text(encoding="utf-8") == original
    missing = mutants.Mutant(
        name="missing",
        rule="r",
        defect=mutants.DefectClass.WRONG_RULE,
        edits=(mutants.Edit(file="m.py", old="z", new="w"),),
    )
    with pytest.raises(mutants.MutantRotError):
        mutants.apply_mutant(tmp_path, missing)
    assert target.read_text(encoding="utf-8") == original


def test_a_mutants_lines_are_the_lines_its_snippet_replaces(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("a = 1\nif x:\n    y = 2\nz = 3\n", encoding="utf-8")
    m = mutants.Mutant(
        name="m",
        rule="r",
        defect=mutants.DefectClass.WRONG_RULE,
        edits=(mutants.Edit(file="m.py", old="if x:\n    y = 2\n", new="if x:\n    y = 3\n"),),
    )
    assert m.lines(tmp_path) == {"m.py": (2, 3)}


def test_the_tool_sample_is_seeded_and_skips_annotations() -> None:
    from tent_mutants import tool  # cosmic-ray: the `mutation` extra, part of `test`

    pool = tool.enumerate_mutants(ROOT, ["tent_credit/_arith.py", "tent_sched/_mlu.py"])
    assert pool
    first = tool.sample(pool, seed=7, per_package=5)
    assert first == tool.sample(pool, seed=7, per_package=5)
    assert first != tool.sample(pool, seed=8, per_package=5)
    assert {m.file.split("/")[0] for m in first} == {"tent_credit", "tent_sched"}
    text = (ROOT / "tent_credit/_arith.py").read_text(encoding="utf-8")
    # `def check_u64(value: int, what: str = "value") -> int:` has annotations only on its line
    signature = text[: text.index("def check_u64")].count("\n") + 1
    assert all(m.line != signature for m in pool if m.file == "tent_credit/_arith.py")
    for m in first:
        mutated = m.mutated_texts(ROOT)[m.file]
        assert mutated != (ROOT / m.file).read_text(encoding="utf-8")
        compile(mutated, m.file, "exec")
