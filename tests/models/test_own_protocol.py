"""A protocol of the user's own: the :class:`tent_models.Model` base, ``--model`` and
``[tool.tent]``, and every checker feature on a user model (coverage, witnesses, symmetry,
recoverability, minimised diff-only counterexamples, compared values, manifest, JUnit)."""

from __future__ import annotations

import json
import sys
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from tent_models import Model, ModelDefinitionError, Verdict, action, invariant, witness
from tent_models.checker import ViolationKind, check, format_counterexample, replay, simulate
from tent_models.cli import main
from tent_models.project import ProjectError, UserModel, load_factory, load_project

Procs = tuple[str, ...]


class Lock(Model[Procs]):
    """``n`` processes around one lock; ``buggy`` skips the lock check."""

    def __init__(self, n: int = 2, *, buggy: bool = False) -> None:
        self.n, self.buggy = n, buggy

    def initial_states(self) -> list[Procs]:
        return [("idle",) * self.n]

    @action(over=lambda self, s: range(self.n))
    def acquire(self, s: Procs, p: int) -> Procs | None:
        if s[p] != "idle" or ("held" in s and not self.buggy):
            return None
        return (*s[:p], "held", *s[p + 1 :])

    @action(over=lambda self, s: range(self.n))
    def release(self, s: Procs, p: int) -> Procs | None:
        return (*s[:p], "idle", *s[p + 1 :]) if s[p] == "held" else None

    @action(unreachable=True)
    def steal(self, s: Procs) -> Procs | None:
        return None

    @invariant(cites="at most one process holds the lock")
    def OneHolder(self, s: Procs) -> Verdict:
        return Verdict(s.count("held") <= 1, holders=s.count("held"))

    @witness
    def SomeoneHolds(self, s: Procs) -> bool:
        return "held" in s

    def canonicalize(self, s: Procs) -> Procs:
        return tuple(sorted(s))  # the processes are interchangeable

    def recovered(self, s: Procs) -> bool:
        return all(local == "idle" for local in s)


class CrashingLock(Lock):
    """A fault loses the lock with its holder, and nothing brings it back: not recoverable."""

    @action(over=lambda self, s: range(self.n), fault=True)
    def crash_holder(self, s: Procs, p: int) -> Procs | None:
        return (*s[:p], "dead", *s[p + 1 :]) if s[p] == "held" else None


def test_a_small_model_is_small_and_every_protocol_method_has_a_default() -> None:
    lock = Lock()
    assert lock.name == "Lock"
    assert lock.action_names() == ("acquire", "release", "steal")
    assert CrashingLock().action_names() == ("acquire", "release", "steal", "crash_holder")
    assert CrashingLock().fault_actions() == {"crash_holder"} and not lock.fault_actions()
    assert lock.unreachable_actions() == {"steal"}
    assert [i.name for i in lock.invariants()] == ["OneHolder"]
    assert [w.name for w in lock.witnesses()] == ["SomeoneHolds"]
    assert lock.within_bounds(("idle", "idle")) and not lock.quiescent_by_bound(("idle", "idle"))
    assert lock.describe(("held", "idle")) == {"[0]": "held", "[1]": "idle"}
    assert lock.apply(("idle", "idle"), "acquire", (1,)) == ("idle", "held")
    assert lock.apply(("idle", "idle"), "acquire", (5,)) is None  # not offered by `over`
    assert lock.apply(("idle", "idle"), "nope", ()) is None
    assert "no action 'nope'" in lock.explain(("idle", "idle"), "nope", ())
    assert "guard of release" in lock.explain(("idle", "idle"), "release", (0,))


def test_the_default_pack_tells_values_apart_and_is_stable() -> None:
    lock = Lock()
    packs = {
        lock.pack(v)  # type: ignore[arg-type]
        for v in (1, True, "1", (1,), frozenset({1}), None, ("a", "b"), ("ab",))
    }
    assert len(packs) == 8
    assert lock.pack(frozenset({"x", "y"})) == lock.pack(frozenset({"y", "x"}))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="override pack"):
        lock.pack(object())  # type: ignore[arg-type]


def test_a_model_marked_twice_is_rejected_when_the_class_is_defined() -> None:
    with pytest.raises(ModelDefinitionError, match="more than one"):

        class Broken(Model[int]):
            @witness
            @invariant()
            def both(self, s: int) -> bool:
                return True


def test_correct_lock_passes_with_coverage_witness_symmetry_and_recoverability() -> None:
    result = check(Lock(3))
    assert result.ok and result.exhaustive, result.violations
    # symmetry: multisets of {idle, held} with at most one held: (i,i,i) and (h,i,i)
    assert result.distinct_states == 2
    assert check(Lock(3), symmetry=False).distinct_states == 4
    coverage = {c.action: c for c in result.coverage}
    assert coverage["acquire"].fired > 0 and coverage["steal"].declared_unreachable
    assert result.witnesses[0].satisfied


def test_buggy_lock_gives_a_diff_only_counterexample_with_the_compared_values() -> None:
    result = check(Lock(2, buggy=True), symmetry=False)
    (violation,) = result.violations
    assert (violation.kind, violation.name) == (ViolationKind.INVARIANT, "OneHolder")
    assert violation.compared == {"holders": 2}
    assert violation.actions == (("acquire", (0,)), ("acquire", (1,)))
    text = format_counterexample(violation)
    assert "1 action acquire(0)\n    [0]: 'idle' -> 'held'\n2 action" in text  # diff only
    assert "compared: holders=2" in text
    assert replay(Lock(2, buggy=True), violation.actions)[-1] == ("held", "held")


def test_simulation_of_a_user_model_minimises_the_counterexample() -> None:
    result = simulate(Lock(3, buggy=True), seed=7, walks=50, depth=40)
    (violation,) = result.violations
    assert len(violation.actions) == 2  # minimised to the two acquires
    assert violation.compared == {"holders": 2}


def test_recoverability_is_judged_when_the_model_has_a_recovery_goal() -> None:
    result = check(CrashingLock(2), check_deadlock=False)
    (violation,) = result.violations
    assert violation.kind is ViolationKind.RECOVERABILITY
    assert violation.actions == (("acquire", (0,)), ("crash_holder", (0,)))

    class NoGoal(CrashingLock):
        recovered = Model.recovered  # no recovery goal declared

    assert not NoGoal(2).declares_recovery
    assert check(NoGoal(2), check_deadlock=False).ok


def test_a_vacuous_witness_and_a_never_firing_action_fail_coverage() -> None:
    class Vacuous(Lock):
        @witness
        def Never(self, s: Procs) -> bool:
            return "dead" in s

        @action
        def wake(self, s: Procs) -> Procs | None:
            return None  # never enabled, and not declared unreachable

    result = check(Vacuous(2))
    failed = {(v.kind, v.name) for v in result.violations}
    assert failed == {(ViolationKind.WITNESS, "Never"), (ViolationKind.COVERAGE, "wake")}


# --- the CLI: --model, [tool.tent], manifest, JUnit -----------------------------------------

LOCK_MODULE = """
from tent_models import Model, Verdict, action, invariant

class Lock(Model):
    def __init__(self, n=2, buggy=False):
        self.n, self.buggy = n, buggy
        self.name = f"lock/{n}" + ("/buggy" if buggy else "")

    def initial_states(self):
        return [("idle",) * self.n]

    @action(over=lambda self, s: range(self.n))
    def acquire(self, s, p):
        if s[p] == "idle" and (self.buggy or "held" not in s):
            return s[:p] + ("held",) + s[p + 1 :]

    @action(over=lambda self, s: range(self.n))
    def release(self, s, p):
        if s[p] == "held":
            return s[:p] + ("idle",) + s[p + 1 :]

    @invariant(cites="one holder at most")
    def OneHolder(self, s):
        return Verdict(s.count("held") <= 1, holders=s.count("held"))

def buggy():
    return Lock(buggy=True)
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user's project folder with ``userlock.py`` beside an empty ``pyproject.toml``."""
    (tmp_path / "userlock.py").write_text(textwrap.dedent(LOCK_MODULE), encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "mine"\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("userlock", None)


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_check_model_runs_only_the_users_model(project: Path) -> None:
    result = run("check", "--model", "userlock:Lock", "--json", "-")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    (target,) = report["targets"]
    assert (target["name"], target["result"], target["states"]) == ("lock/2", "ok", 3)
    assert "no manifest configured" in target["message"]


def test_a_failing_user_model_exits_1_with_the_counterexample_in_junit(project: Path) -> None:
    junit = project / "report.xml"
    report = project / "report.json"
    result = run("check", "--model", "userlock:buggy", "--junit", str(junit), "--json", str(report))
    assert result.exit_code == 1
    assert "compared: holders=2" in result.output
    (violation,) = json.loads(report.read_text(encoding="utf-8"))["targets"][0]["violations"]
    assert violation["compared"] == {"holders": 2}
    case = ET.parse(junit).getroot().find("./testsuite/testcase")
    assert case is not None and case.get("name") == "lock/2/buggy"
    failure = case.find("failure")
    assert failure is not None and "acquire(1)" in (failure.text or "")
    assert "compared: holders=2" in (failure.text or "")


def test_pyproject_table_lists_models_bounds_and_a_manifest(project: Path) -> None:
    (project / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [tool.tent]
            manifest = "tent-manifest.json"

            [[tool.tent.models]]
            factory = "userlock:Lock"
            bounds = { n = 3 }
            """
        ),
        encoding="utf-8",
    )
    missing = run("check", "--no-progress")
    assert missing.exit_code == 1  # the manifest file does not exist yet
    assert "cannot read manifest" in missing.output
    updated = run("manifest", "update")
    assert updated.exit_code == 0, updated.output
    manifest = json.loads((project / "tent-manifest.json").read_text(encoding="utf-8"))
    assert manifest["models"]["lock/3"]["distinct_states"] == 4
    assert run("check").exit_code == 0
    # a changed state space is caught against the recorded manifest
    text = (project / "pyproject.toml").read_text(encoding="utf-8")
    (project / "pyproject.toml").write_text(
        text.replace("bounds = { n = 3 }", 'bounds = { n = 4 }\nname = "lock/3"'),
        encoding="utf-8",
    )
    changed = run("check", "--json", "-")
    assert changed.exit_code == 1
    assert json.loads(changed.stdout)["targets"][0]["result"] == "manifest mismatch"


def test_a_typo_in_the_table_suggests_the_key(project: Path) -> None:
    (project / "pyproject.toml").write_text(
        '[[tool.tent.models]]\nfatcory = "userlock:Lock"\n', encoding="utf-8"
    )
    result = run("check")
    assert result.exit_code == 2
    assert "did you mean 'factory'?" in result.output
    with pytest.raises(ProjectError, match="did you mean 'manifest'"):
        (project / "pyproject.toml").write_text('[tool.tent]\nmanfest = "x"\n', encoding="utf-8")
        load_project(project / "pyproject.toml")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("userlock", "must look like package.module:factory"),
        ("nowhere:Lock", "cannot import 'nowhere'"),
        ("userlock:Lokc", "did you mean 'Lock'"),
    ],
)
def test_bad_model_specs_are_usage_errors_before_anything_runs(
    project: Path, spec: str, message: str
) -> None:
    result = run("check", "--model", spec)
    assert result.exit_code == 2
    assert message in result.output


def test_bad_bounds_and_duplicate_names_are_reported(project: Path) -> None:
    with pytest.raises(ProjectError, match="bounds"):
        from tent_models.project import build

        build(UserModel(factory="userlock:Lock", bounds={"m": 1}), root=project)
    result = run("check", "--model", "userlock:Lock", "--model", "userlock:Lock")
    assert result.exit_code == 2 and "two models are named lock/2" in result.output
    assert callable(load_factory("userlock:buggy", root=project))
