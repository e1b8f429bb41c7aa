"""Which tests execute which line: one run of the suite under per-test coverage contexts.

The unmutated copy runs the whole suite once under pytest-cov with ``--cov-context=test``:
coverage then records, for every line of ``tent_credit`` and ``tent_sched``, the ids of the tests
(setup, call and teardown) that executed it. A mutant then runs only the tests whose context
covers one of its lines. Lines executed only while modules are imported (module-level tables,
class bodies, decorators) carry no test context: a mutant there runs every test that covers any
line of its file instead. A line nobody executes is a survivor without a run (``no_coverage``).

The same run records each test's duration (``--durations=0``), which orders a mutant's tests
fastest first and sets its timeout, and the tests that already fail on the unmutated code (work
in progress elsewhere): those are never selected, so a mutant only counts as killed by a test
that passes on the real implementation.

The map is cached (JSON) under a key of every file's content and the suite's arguments, so a
second run of an unchanged tree skips the coverage run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

COVERED_PACKAGES = ("tent_credit", "tent_sched")
_DURATION = re.compile(r"^\s*([0-9.]+)s (setup|call|teardown)\s+(\S.*?)\s*$")
_RESULT = re.compile(r"^(FAILED|ERROR) (\S+)")


@attrs.frozen(kw_only=True)
class CoverageMap:
    # file (relative) -> line -> test ids
    tests_by_line: Mapping[str, Mapping[int, tuple[str, ...]]]
    # file -> lines executed with no test context (at import)
    import_lines: Mapping[str, frozenset[int]]
    durations: Mapping[str, float]
    failing: tuple[str, ...]
    seconds: float
    tests: int

    def select(self, lines: Mapping[str, Sequence[int]]) -> tuple[list[str], bool]:
        """The tests covering ``lines`` (fastest first) and whether any line was executed."""
        chosen: set[str] = set()
        executed = False
        for file, nums in lines.items():
            by_line = self.tests_by_line.get(file, {})
            imported = self.import_lines.get(file, frozenset())
            for n in nums:
                if n in by_line:
                    chosen.update(by_line[n])
                    executed = True
                elif n in imported:
                    executed = True
                    for ids in by_line.values():  # module-level code: the file's tests
                        chosen.update(ids)
        chosen.difference_update(self.failing)
        return sorted(chosen, key=lambda t: (self.durations.get(t, 0.0), t)), executed

    def cost(self, tests: Sequence[str]) -> float:
        return sum(self.durations.get(t, 0.0) for t in tests)

    def to_json(self) -> dict[str, object]:
        return {
            "tests_by_line": {
                f: {str(n): list(ids) for n, ids in lines.items()}
                for f, lines in self.tests_by_line.items()
            },
            "import_lines": {f: sorted(v) for f, v in self.import_lines.items()},
            "durations": dict(self.durations),
            "failing": list(self.failing),
            "seconds": self.seconds,
            "tests": self.tests,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> CoverageMap:
        tbl = doc["tests_by_line"]
        imp = doc["import_lines"]
        assert isinstance(tbl, dict) and isinstance(imp, dict)
        durations = doc["durations"]
        failing = doc["failing"]
        assert isinstance(durations, dict) and isinstance(failing, list)
        return cls(
            tests_by_line={
                f: {int(n): tuple(ids) for n, ids in lines.items()} for f, lines in tbl.items()
            },
            import_lines={f: frozenset(v) for f, v in imp.items()},
            durations=durations,
            failing=tuple(failing),
            seconds=float(doc["seconds"]),  # type: ignore[arg-type]
            tests=int(doc["tests"]),  # type: ignore[call-overload]
        )


def cache_key(copy: Path, files: Sequence[str], suite_args: Sequence[str]) -> str:
    digest = hashlib.sha256(json.dumps(list(suite_args)).encode())
    for f in files:
        digest.update(f.encode() + b"\0")
        digest.update(hashlib.sha256((copy / f).read_bytes()).digest())
    return digest.hexdigest()[:24]


def measure(
    copy: Path, suite_args: Sequence[str], env: Mapping[str, str], *, jobs: int
) -> CoverageMap:
    """Run ``pytest suite_args`` in ``copy`` under per-test contexts; build the map."""
    from coverage import CoverageData

    data_file = copy / ".coverage.mutants"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *suite_args,
        "-q",
        "-p",
        "no:cacheprovider",
        "-rfE",
        "--durations=0",
        "--durations-min=0",
        "--cov-context=test",
        "--cov-report=",
        *(f"--cov={p}" for p in COVERED_PACKAGES),
    ]
    if jobs > 1:
        cmd += ["-n", str(jobs)]
    run_env = dict(env)
    run_env["COVERAGE_FILE"] = str(data_file)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=copy, env=run_env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise RuntimeError(f"the coverage run exited {proc.returncode}:\n{tail}")
    durations: dict[str, float] = {}
    failing: list[str] = []
    for line in proc.stdout.splitlines():
        if m := _DURATION.match(line):
            durations[m.group(3)] = durations.get(m.group(3), 0.0) + float(m.group(1))
        elif m := _RESULT.match(line):
            failing.append(m.group(2))
    data = CoverageData(basename=str(data_file))
    data.read()
    root = str(copy.resolve()) + os.sep
    tests_by_line: dict[str, dict[int, tuple[str, ...]]] = {}
    import_lines: dict[str, frozenset[int]] = {}
    tests: set[str] = set()
    for measured in data.measured_files():
        resolved = str(Path(measured).resolve())
        if not resolved.startswith(root):
            continue
        rel = resolved[len(root) :]
        by_line: dict[int, tuple[str, ...]] = {}
        imported: set[int] = set()
        for lineno, contexts in data.contexts_by_lineno(measured).items():
            ids = sorted({c.rsplit("|", 1)[0] for c in contexts if "|" in c})
            if ids:
                by_line[lineno] = tuple(ids)
                tests.update(ids)
            else:
                imported.add(lineno)
        tests_by_line[rel] = by_line
        import_lines[rel] = frozenset(imported)
    return CoverageMap(
        tests_by_line=tests_by_line,
        import_lines=import_lines,
        durations=durations,
        failing=tuple(failing),
        seconds=round(seconds, 2),
        tests=len(tests),
    )


def load_or_measure(
    copy: Path,
    files: Sequence[str],
    suite_args: Sequence[str],
    env: Mapping[str, str],
    *,
    jobs: int,
    cache_dir: Path | None,
    reuse: Path | None = None,
) -> tuple[CoverageMap, bool]:
    """The map from the cache if the tree and arguments are unchanged; else measure it.

    ``reuse`` loads a map written earlier whatever changed since (tests added after it are
    never selected, and line numbers must still match: for resuming a cut run only).
    """
    if reuse is not None:
        return CoverageMap.from_json(json.loads(reuse.read_text(encoding="utf-8"))), True
    path: Path | None = None
    if cache_dir is not None:
        path = cache_dir / f"coverage-{cache_key(copy, files, suite_args)}.json"
        if path.is_file():
            return CoverageMap.from_json(json.loads(path.read_text(encoding="utf-8"))), True
    cov = measure(copy, suite_args, env, jobs=jobs)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cov.to_json()), encoding="utf-8")
        tmp.replace(path)
    return cov, False
