"""Copies, per-mutant runs and the report.

Every run happens in a temporary copy of the repository (tracked plus untracked, non-ignored
files), one per worker; a mutant is written into its worker's copy, run, and the original text
put back. The checkout itself is never written, so an interrupted run leaves it clean.

Per mutant, the tests covering its lines (:mod:`.coverage_map`) run in two stages: first those of
the conformance suite (``tests/conformance``), then, only if the mutant survived them, the rest.
So every mutant gets two verdicts at the cost of at most one full selection: killed by the
conformance suite alone, and killed by the whole suite. A stage stops at its first failure
(``-x``), runs fastest tests first, and has a timeout of ``45 s + 5 ×`` its tests' measured
durations; a timeout counts as a kill (the mutant made a test hang or crawl).
"""

from __future__ import annotations

import os
import queue
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from .coverage_map import CoverageMap, load_or_measure
from .model import AnyMutant, Mutant, MutantRotError, NoMutation, restore, write_mutant

# The packages live in these directories of a copy (the venv's editable install points at the
# real checkout, so PYTHONPATH must put the copy's directories first).
_PACKAGE_DIRS = ("", "spec", "models", "transport")
_PACKAGES = ("tent_credit", "tent_sched", "tent_spec", "tent_models")
CONFORMANCE = "tests/conformance/"
# Tests that must not run against a mutated copy: the list's own check would "kill" every
# mutant (its snippets no longer match), and the benchmark's own test would recurse.
SELF_TESTS = ("tests/conformance/test_mutants_list.py", "tests/packaging/test_mutants_benchmark.py")
DEFAULT_SUITE = ("tests", "docs")
MARKERS = "not slow and not transport"


def repo_files(root: Path) -> list[str]:
    """Tracked plus untracked, non-ignored files (other work in progress is part of the suite)."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return sorted({f for f in out.split("\0") if f and (root / f).is_file()})


def make_copy(root: Path, files: Sequence[str], dest: Path) -> None:
    for f in files:
        target = dest / f
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / f, target)


def copy_env(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(copy / d) if d else str(copy) for d in _PACKAGE_DIRS)
    # No bytecode: a mutant of the same size written within the same second as the original
    # would otherwise be served from a stale .pyc.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("HYPOTHESIS_PROFILE", None)  # the dev profile, as in the everyday suite
    env.pop("PYTEST_ADDOPTS", None)
    return env


def verify_imports(copy: Path) -> None:
    """Fail loudly unless every package is imported from ``copy`` (not the editable install)."""
    code = "; ".join(f"import {p}; print({p}.__file__)" for p in _PACKAGES)
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=copy,
        env=copy_env(copy),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    stray = [path for path in out if not Path(path).resolve().is_relative_to(copy.resolve())]
    if stray:
        raise RuntimeError(f"packages imported from outside the copy {copy}: {stray}")


def suite_args(suite: Sequence[str]) -> list[str]:
    return [*suite, "-m", MARKERS, *(f"--ignore={t}" for t in SELF_TESTS)]


@attrs.frozen(kw_only=True)
class Stage:
    """One pytest run of a mutant's selected tests."""

    tests: int
    killed: bool
    outcome: str  # passed / failed / error / timeout
    killed_by: str | None
    seconds: float


@attrs.frozen(kw_only=True)
class Result:
    ident: str
    kind: str  # semantic / tool
    file: str
    lines: tuple[int, ...]
    what: str  # the rule (semantic) or the changed line (tool)
    defect: str | None
    outcome: str  # killed / survived / no_coverage / incompetent / not_run
    by_conformance: bool
    by_suite: bool
    killed_by: str | None
    selected: int
    selected_conformance: int
    seconds: float


def _run_pytest(copy: Path, tests: Sequence[str], timeout: float) -> Stage:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-x",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "-rfE",
        "-m",
        MARKERS,
        *tests,
    ]
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=copy,
        env=copy_env(copy),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # so a timeout ends the tests' own children too
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return Stage(
            tests=len(tests),
            killed=True,
            outcome="timeout",
            killed_by=f"timeout after {timeout:.0f} s",
            seconds=round(time.perf_counter() - start, 2),
        )
    finally:
        shutil.rmtree(copy / ".hypothesis", ignore_errors=True)  # no examples carried over
    seconds = round(time.perf_counter() - start, 2)
    rc = proc.returncode
    failing = [
        line.split(" ")[1] for line in out.splitlines() if line.startswith(("FAILED ", "ERROR "))
    ]
    if rc == 0:
        return Stage(
            tests=len(tests), killed=False, outcome="passed", killed_by=None, seconds=seconds
        )
    # 1: a test failed; 2: collection/import failed (the mutant breaks the import); 3: pytest's
    # internal error; 4: a selected test id no longer exists (its parametrization is computed
    # from the mutated code). Each means the mutated code changed what the suite observes.
    outcome = {1: "failed", 2: "error", 3: "error", 4: "error"}.get(rc, f"exit {rc}")
    tail = out.strip().splitlines()[-1:] if out.strip() else [""]
    return Stage(
        tests=len(tests),
        killed=rc in (1, 2, 3, 4),
        outcome=outcome,
        killed_by=failing[0] if failing else f"pytest exit {rc}: {tail[0][:120]}",
        seconds=seconds,
    )


def _timeout(cov: CoverageMap, tests: Sequence[str]) -> float:
    return 45.0 + 5.0 * cov.cost(tests)


def run_one(copy: Path, mutant: AnyMutant, cov: CoverageMap) -> Result:
    kind = "semantic" if isinstance(mutant, Mutant) else "tool"
    lines = mutant.lines(copy)
    file = ", ".join(lines)
    nums = tuple(n for v in lines.values() for n in v)
    defect = mutant.defect.value if isinstance(mutant, Mutant) else None
    start = time.perf_counter()

    def result(outcome: str, what: str, **kw: object) -> Result:
        fields: dict[str, object] = {
            "by_conformance": False,
            "by_suite": False,
            "killed_by": None,
            "selected": 0,
            "selected_conformance": 0,
        }
        fields.update(kw)
        return Result(
            ident=mutant.ident,
            kind=kind,
            file=file,
            lines=nums,
            what=what,
            defect=defect,
            outcome=outcome,
            seconds=round(time.perf_counter() - start, 2),
            **fields,  # type: ignore[arg-type]
        )

    try:
        what = mutant.describe(copy)
        texts = mutant.mutated_texts(copy)
    except NoMutation:
        return result("incompetent", "cosmic-ray found no such occurrence")
    for f, text in texts.items():
        try:
            compile(text, f, "exec")
        except SyntaxError as exc:
            return result("incompetent", f"{what} (syntax error: {exc.msg})")
    tests, executed = cov.select(lines)
    if not executed or not tests:
        return result("no_coverage", what)
    conformance = [t for t in tests if t.startswith(CONFORMANCE)]
    rest = [t for t in tests if not t.startswith(CONFORMANCE)]
    originals = write_mutant(copy, mutant)
    try:
        first = _run_pytest(copy, conformance, _timeout(cov, conformance)) if conformance else None
        if first is not None and first.killed:
            return result(
                "killed",
                what,
                by_conformance=True,
                by_suite=True,
                killed_by=first.killed_by,
                selected=len(tests),
                selected_conformance=len(conformance),
            )
        second = _run_pytest(copy, rest, _timeout(cov, rest)) if rest else None
    finally:
        restore(copy, originals)
    killed = second is not None and second.killed
    return result(
        "killed" if killed else "survived",
        what,
        by_suite=killed,
        killed_by=second.killed_by if killed and second is not None else None,
        selected=len(tests),
        selected_conformance=len(conformance),
    )


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(
    root: Path,
    mutants: Sequence[AnyMutant],
    *,
    suite: Sequence[str] = DEFAULT_SUITE,
    jobs: int = 1,
    budget_s: float | None = None,
    cache_dir: Path | None = None,
    reuse_coverage: Path | None = None,
    progress: Callable[[Result], None] | None = None,
) -> dict[str, object]:
    """Run every mutant (until ``budget_s`` is spent); return the report as a JSON-able dict."""
    for m in mutants:  # every mutant must still apply before anything runs
        if isinstance(m, Mutant):
            m.mutated_texts(root)
    started = time.perf_counter()
    files = repo_files(root)
    args = suite_args(suite)
    with tempfile.TemporaryDirectory(prefix="tent-mutants-") as tmp:
        copies = [Path(tmp) / f"w{i}" for i in range(jobs)]
        for copy in copies:
            make_copy(root, files, copy)
            verify_imports(copy)
        cpu0 = _cpu_seconds()
        cov, cached = load_or_measure(
            copies[0],
            files,
            args,
            copy_env(copies[0]),
            jobs=jobs,
            cache_dir=cache_dir,
            reuse=reuse_coverage,
        )
        coverage_cpu = _cpu_seconds() - cpu0
        shutil.rmtree(copies[0] / ".hypothesis", ignore_errors=True)
        coverage_wall = time.perf_counter() - started
        todo: queue.Queue[tuple[int, AnyMutant]] = queue.Queue()
        for item in enumerate(mutants):
            todo.put(item)
        results: dict[int, Result] = {}
        lock = threading.Lock()
        mutants_started = time.perf_counter()

        def worker(copy: Path) -> None:
            while True:
                try:
                    index, mutant = todo.get_nowait()
                except queue.Empty:
                    return
                if budget_s is not None and time.perf_counter() - started > budget_s:
                    res = _not_run(copy, mutant)
                else:
                    res = run_one(copy, mutant, cov)
                with lock:
                    results[index] = res
                    if progress is not None:
                        progress(res)

        threads = [threading.Thread(target=worker, args=(c,)) for c in copies]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        mutants_wall = time.perf_counter() - mutants_started
    ordered = [results[i] for i in range(len(mutants))]
    cpu_total = _cpu_seconds() - cpu0
    return _report(
        ordered,
        cov=cov,
        cached=cached,
        suite=suite,
        jobs=jobs,
        coverage_wall=coverage_wall,
        coverage_cpu=coverage_cpu,
        mutants_wall=mutants_wall,
        mutants_cpu=cpu_total - coverage_cpu,
        total_wall=time.perf_counter() - started,
    )


def _not_run(copy: Path, mutant: AnyMutant) -> Result:
    lines = mutant.lines(copy)
    return Result(
        ident=mutant.ident,
        kind="semantic" if isinstance(mutant, Mutant) else "tool",
        file=mutant.file,
        lines=tuple(n for v in lines.values() for n in v),
        what="",
        defect=mutant.defect.value if isinstance(mutant, Mutant) else None,
        outcome="not_run",
        by_conformance=False,
        by_suite=False,
        killed_by=None,
        selected=0,
        selected_conformance=0,
        seconds=0.0,
    )


def _rates(results: Sequence[Result]) -> dict[str, object]:
    # Incompetent (not a mutation) and not-run mutants are outside the denominator; uncovered
    # ones are inside it (a line no test executes is a gap of the suite).
    judged = [r for r in results if r.outcome in ("killed", "survived", "no_coverage")]
    n = len(judged)
    conf = sum(r.by_conformance for r in judged)
    whole = sum(r.by_suite for r in judged)
    return {
        "mutants": len(results),
        "judged": n,
        "killed_by_conformance": conf,
        "killed_by_suite": whole,
        "survived": sum(r.outcome == "survived" for r in judged),
        "no_coverage": sum(r.outcome == "no_coverage" for r in judged),
        "incompetent": sum(r.outcome == "incompetent" for r in results),
        "not_run": sum(r.outcome == "not_run" for r in results),
        "kill_rate_conformance": round(conf / n, 3) if n else None,
        "kill_rate_suite": round(whole / n, 3) if n else None,
    }


def _summary(results: Sequence[Result]) -> dict[str, object]:
    semantic = [r for r in results if r.kind == "semantic"]
    tool = [r for r in results if r.kind == "tool"]
    return {
        "semantic": _rates(semantic),
        "tool": _rates(tool),
        "all": _rates(results),
        "survivors": [
            {
                "mutant": r.ident,
                "kind": r.kind,
                "where": f"{r.file}:{r.lines[0] if r.lines else '?'}",
                "mutation": r.what,
                "outcome": r.outcome,
                "selected_tests": r.selected,
            }
            for r in results
            if r.outcome in ("survived", "no_coverage")
        ],
        "mutants": [attrs.asdict(r) for r in results],
    }


def _report(results: Sequence[Result], **kw: object) -> dict[str, object]:
    cov = kw["cov"]
    assert isinstance(cov, CoverageMap)
    return {
        **_summary(results),
        "suite": list(kw["suite"]),  # type: ignore[call-overload]
        "markers": MARKERS,
        "jobs": kw["jobs"],
        "coverage": {
            "cached": kw["cached"],
            "tests": cov.tests,
            "failing_on_unmutated_code": list(cov.failing),
            "measured_seconds": cov.seconds,
            "wall_seconds": round(float(kw["coverage_wall"]), 2),  # type: ignore[arg-type]
            "cpu_seconds": round(float(kw["coverage_cpu"]), 2),  # type: ignore[arg-type]
        },
        "mutant_runs": {
            "wall_seconds": round(float(kw["mutants_wall"]), 2),  # type: ignore[arg-type]
            "cpu_seconds": round(float(kw["mutants_cpu"]), 2),  # type: ignore[arg-type]
        },
        "seconds": round(float(kw["total_wall"]), 2),  # type: ignore[arg-type]
        "python": sys.version.split()[0],
    }


def merge(reports: Sequence[dict[str, object]]) -> dict[str, object]:
    """One report of several runs (a run cut by its budget, then resumed with the rest).

    A mutant judged in any run keeps its judgement (the last one); rates are recomputed over
    the union; seconds and CPU seconds are summed.
    """
    latest: dict[str, Result] = {}
    for report in reports:
        for row in report["mutants"]:  # type: ignore[attr-defined]
            res = Result(**{**row, "lines": tuple(row["lines"])})
            if res.outcome != "not_run" or res.ident not in latest:
                latest[res.ident] = res
    results = list(latest.values())
    merged = _summary(results)

    def total(section: str, field: str) -> float:
        return round(sum(float(r[section][field]) for r in reports), 2)  # type: ignore[index]

    merged["runs"] = len(reports)
    merged["coverage"] = reports[0]["coverage"]
    merged["mutant_runs"] = {
        "wall_seconds": total("mutant_runs", "wall_seconds"),
        "cpu_seconds": total("mutant_runs", "cpu_seconds"),
    }
    merged["seconds"] = round(sum(float(r["seconds"]) for r in reports), 2)  # type: ignore[arg-type]
    for key in ("suite", "markers", "jobs", "python", "seed", "tool_sample_per_package"):
        if key in reports[0]:
            merged[key] = reports[0][key]
    return merged


__all__ = ["MutantRotError", "Result", "merge", "run", "run_one"]
