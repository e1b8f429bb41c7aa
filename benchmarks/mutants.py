"""Proof that the checks bite: semantic mutants of the implementation vs the conformance suite.

Each mutant breaks exactly one rule of SEMANTICS.md / the credit RFC by a textual replacement
in the sources (one or more :class:`Edit`, each of which must match exactly once, so the list
cannot silently rot when the code changes). Every mutant is applied in its own temporary copy of
the repository and the conformance suite (``tests/conformance``, not the slow tests) is run
against that copy; the suite must fail for every mutant.

Before the mutants, the unmutated copy is run once (the baseline). Tests that already fail
there (work in progress elsewhere) are deselected in the mutant runs and listed in the output,
so a mutant only counts as killed by a test that passes on the real implementation.

Prints one JSON line::

    {"killed": K, "total": N, "mutants": [{"name", "file", "rule", "killed", "seconds",
     "killed_by"}, ...], "baseline": {...}, "suite": ..., "seconds": ...}

and exits 0 iff every mutant was killed.

    python benchmarks/mutants.py [--only NAME]... [--jobs N] [--suite tests/conformance]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SUITE = "tests/conformance"
# The packages live in these directories of a copy (the venv's editable install points at the
# real checkout, so PYTHONPATH must put the copy's directories first).
_PACKAGE_DIRS = ("", "spec", "models", "transport")
_PACKAGES = ("tent_credit", "tent_sched", "tent_spec", "tent_models")
# The list's own check would "kill" every mutant (its snippets no longer match in a mutated copy).
_SELF_TEST = "tests/conformance/test_mutants_list.py"
_RESULT_LINE = re.compile(r"^(FAILED|ERROR) (\S+)")


class MutantRotError(Exception):
    """A mutant's snippet no longer matches exactly once: the list must be updated."""


@attrs.frozen(kw_only=True)
class Edit:
    """Replace ``old`` (which must occur exactly once in ``file``) by ``new``."""

    file: str
    old: str
    new: str


@attrs.frozen(kw_only=True)
class Mutant:
    """One semantic fault: the rule it breaks and the edits that break it."""

    name: str
    rule: str
    edits: tuple[Edit, ...]

    @property
    def file(self) -> str:
        return ", ".join(dict.fromkeys(e.file for e in self.edits))


@attrs.frozen(kw_only=True)
class MutantResult:
    name: str
    file: str
    rule: str
    killed: bool
    seconds: float
    killed_by: str | None
    returncode: int


_LEDGER = "tent_credit/_ledger.py"
_ALLOCATOR = "tent_credit/_allocator.py"
_INBOX = "tent_credit/_inbox.py"
_ENDPOINTS = "tent_credit/_endpoints.py"
_QUEUE = "tent_sched/_queue.py"
_GATE = "tent_credit/_gate.py"

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        name="equal_sequence_is_new",
        rule="SEMANTICS §6 apply_update 3: sequence <= last is DUPLICATE_OR_OLD",
        edits=(
            Edit(
                file=_LEDGER,
                old="    if sequence <= last_sequence:\n        return UpdateDisposition.DUPLICATE",
                new="    if sequence < last_sequence:\n        return UpdateDisposition.DUPLICATE",
            ),
        ),
    ),
    Mutant(
        name="grants_as_deltas",
        rule="SEMANTICS §6: grant totals are cumulative, replaced not added",
        edits=(
            Edit(
                file=_LEDGER,
                old="            grant[g.resource] = g.amount\n",
                new="            grant[g.resource] += g.amount\n",
            ),
        ),
    ),
    Mutant(
        name="decreasing_grant_accepted",
        rule="SEMANTICS §6 apply_update 4: a grant below its previous total is GrantDecreased",
        edits=(
            Edit(
                file=_LEDGER,
                old="        if total < previous_totals[r]:\n",
                new="        if False and total < previous_totals[r]:\n",
            ),
        ),
    ),
    Mutant(
        name="reserve_per_resource",
        rule="RFC atomic multi-resource eligibility: reserve all of a charge or nothing",
        edits=(
            Edit(
                file=_LEDGER,
                old=(
                    "                exhausted.append(r)\n"
                    "        if exhausted is not None:\n"
                    "            self._blocked += 1\n"
                    "            return Blocked(key=key, exhausted=tuple(exhausted))\n"
                    "        for r, amount in parts:\n"
                    "            # Cannot overflow: amount <= available, so consumed + amount"
                    " <= grant_total <= u64 max.\n"
                    "            consumed[r] += amount\n"
                ),
                new=(
                    "                exhausted.append(r)\n"
                    "            else:  # mutant: consume resource by resource\n"
                    "                consumed[r] += amount\n"
                    "        if exhausted is not None:\n"
                    "            self._blocked += 1\n"
                    "            return Blocked(key=key, exhausted=tuple(exhausted))\n"
                ),
            ),
        ),
    ),
    Mutant(
        name="rollback_unchecked",
        rule="SEMANTICS §6 rollback: consumed never underflows (checked_sub)",
        edits=(
            Edit(
                file=_LEDGER,
                old="        after = [checked_sub(consumed[r], amount) for r, amount in parts]\n",
                new="        after = [consumed[r] - amount for r, amount in parts]\n",
            ),
        ),
    ),
    Mutant(
        name="update_epoch_unchecked",
        rule="SEMANTICS §6 apply_update 2: an update of another epoch is InvalidEntry",
        edits=(
            Edit(
                file=_LEDGER,
                old="            if e.epoch != epoch:\n",
                new="            if False and e.epoch != epoch:\n",
            ),
        ),
    ),
    Mutant(
        name="same_epoch_activation_resets",
        rule="SEMANTICS §6/§7 activate 4: the same epoch is a no-op, consumption is kept",
        edits=(
            Edit(
                file=_LEDGER,
                old="        if epoch == current.epoch:\n            return\n",
                new=(
                    "        if epoch == current.epoch:\n"
                    "            current.consumed = [0] * _SLOTS\n"
                    "            return\n"
                ),
            ),
        ),
    ),
    Mutant(
        name="completion_mints_credit",
        rule="RFC concurrency rule 6: completion never mints local credit",
        edits=(
            Edit(
                file=_ENDPOINTS,
                old="        self._in_flight[slot] = count - 1\n",
                new=(
                    "        self._in_flight[slot] = count - 1\n"
                    "        for r, amount in token.charge.parts:\n"
                    "            token._entry.consumed[r] -= amount\n"
                ),
            ),
        ),
    ),
    Mutant(
        name="grant_past_capacity",
        rule="SEMANTICS §8: outstanding grants never exceed capacity",
        edits=(
            Edit(
                file=_ALLOCATOR,
                old=(
                    "        offer = max(0, min(wanted, max_grant.get(resource, 0),"
                    " free.get(resource, 0)))\n"
                ),
                new="        offer = max(0, min(wanted, max_grant.get(resource, 0)))\n",
            ),
            Edit(
                file=_ALLOCATOR,
                old=(
                    '                raise TooManyRequests(f"{ident} would over-commit'
                    ' {r.name} (SEMANTICS §8)")\n'
                ),
                new="                pass  # mutant: over-commit allowed\n",
            ),
        ),
    ),
    Mutant(
        name="reclaim_before_fence",
        rule="SEMANTICS §8: unlanded credit is reclaimed only after the epoch was fenced",
        edits=(
            Edit(
                file=_ALLOCATOR,
                old="    (EpochState.ACTIVE, _Event.FENCE): EpochState.FENCING,\n",
                new=(
                    "    (EpochState.ACTIVE, _Event.FENCE): EpochState.FENCING,\n"
                    "    (EpochState.ACTIVE, _Event.COMPLETE_FENCE): EpochState.FENCED,\n"
                ),
            ),
        ),
    ),
    Mutant(
        name="inbox_coalesces_by_sequence",
        rule="SEMANTICS §8 inbox: coalescing compares (epoch, sequence), not the sequence alone",
        edits=(
            Edit(
                file=_INBOX,
                old=(
                    "            if (update.epoch, update.sequence) >"
                    " (pending.epoch, pending.sequence):\n"
                ),
                new="            if update.sequence > pending.sequence:\n",
            ),
        ),
    ),
    Mutant(
        name="drop_no_deadline_owner",
        rule="SEMANTICS §1/§2: an owner without a deadline is never dropped",
        edits=(
            Edit(
                file=_QUEUE,
                old="                        if mlu >= theta:",
                new="                        if mlu >= theta or view.deadline_ns == 0:",
            ),
        ),
    ),
    Mutant(
        name="dropped_owner_uses_budget",
        rule="SEMANTICS §2 pick: a dropped owner uses no byte budget",
        edits=(
            Edit(
                file=_QUEUE,
                old="                            dropped.append((owner, mlu))\n",
                new=(
                    "                            dropped.append((owner, mlu))\n"
                    "                            budget_bytes -= view.length\n"
                ),
            ),
        ),
    ),
    Mutant(
        name="failed_keeps_dispatching_bytes",
        rule="SEMANTICS §2 complete: dispatching_bytes drops whatever the terminal status",
        edits=(
            Edit(
                file=_QUEUE,
                old=(
                    "        if owner.view.degradation_eligible:\n"
                    "            self._dispatching_bytes -= owner.view.length\n"
                ),
                new=(
                    "        if owner.view.degradation_eligible"
                    " and status is not TaskStatus.FAILED:\n"
                    "            self._dispatching_bytes -= owner.view.length\n"
                ),
            ),
        ),
    ),
    Mutant(
        name="equal_deadline_inserted_first",
        rule="SEMANTICS §2 admission: EDF with FIFO ties (bisect_right)",
        edits=(
            Edit(
                file=_QUEUE,
                old="bisect.insort_right(self._entries, owner,",
                new="bisect.insort_left(self._entries, owner,",
            ),
        ),
    ),
    # -- issue 10: the stale rule and the gate's route removal (class: missing check,
    #    validate-after-mutate, boundary flip) --------------------------------------------
    Mutant(
        name="stale_sender_reserves",
        rule='RFC state machine rule 2: "Stale: stop new credit-gated dispatch"',
        edits=(
            Edit(
                file="tent_credit/_negotiation.py",
                old="        return self._state is NegotiationState.ACTIVE\n\n    def legacy",
                new="        return self._state in "
                "(NegotiationState.ACTIVE, NegotiationState.STALE)\n\n    def legacy",
            ),
        ),
    ),
    Mutant(
        name="route_removal_keeps_reserved_tokens",
        rule="docs/gate.md: removing a route rolls back its RESERVED tokens (exact credit back)",
        edits=(
            Edit(
                file=_GATE,
                old="tokens = [t for t in self._unsettled.values() if t._route is route]",
                new="tokens: list[GateToken] = []",
            ),
        ),
    ),
    Mutant(
        name="removed_route_raises_out_of_the_pick",
        rule="docs/gate.md: an owner of a removed route is rejected (ROUTE_REMOVED), not raised",
        edits=(
            Edit(
                file=_GATE,
                old="if ident not in self._routes and (ctx.snapshot",
                new="if False and ident not in self._routes and (ctx.snapshot",
            ),
        ),
    ),
    Mutant(
        name="replace_endpoint_fences_before_validating",
        rule="DESIGN principle 5: validate everything, then commit once (replace_endpoint)",
        edits=(
            Edit(
                file=_GATE,
                old="""        if endpoint is route.endpoint:
            raise InvalidArgument("the route already uses this endpoint")
        removal = self._detach(route)""",
                new="""        removal = self._detach(route)
        if endpoint is route.endpoint:
            raise InvalidArgument("the route already uses this endpoint")""",
            ),
        ),
    ),
    Mutant(
        name="legacy_window_off_by_one",
        rule="SEMANTICS: a legacy route dispatches at most legacy_window owners at a time",
        edits=(
            Edit(
                file=_GATE,
                old="if route.legacy_in_flight >= self._config.legacy_window:",
                new="if route.legacy_in_flight > self._config.legacy_window:",
            ),
        ),
    ),
)


# -- applying --------------------------------------------------------------------------------


def check_edit(root: Path, edit: Edit) -> str:
    """Return the file's text; raise MutantRotError unless ``edit.old`` occurs exactly once."""
    text = (root / edit.file).read_text(encoding="utf-8")
    count = text.count(edit.old)
    if count != 1:
        raise MutantRotError(f"{edit.file}: snippet matches {count} times, not once: {edit.old!r}")
    return text


def apply_mutant(root: Path, mutant: Mutant) -> None:
    """Apply every edit of ``mutant`` under ``root``; all are checked before any is written."""
    texts: dict[str, str] = {}
    for edit in mutant.edits:
        current = texts.get(edit.file)
        if current is None:
            current = check_edit(root, edit)
        elif current.count(edit.old) != 1:
            raise MutantRotError(f"{edit.file}: snippet does not match once: {edit.old!r}")
        texts[edit.file] = current.replace(edit.old, edit.new, 1)
    for file, text in texts.items():
        (root / file).write_text(text, encoding="utf-8")


def repo_files(root: Path) -> list[str]:
    """Tracked plus untracked, non-ignored files (other work in progress is part of the suite)."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return sorted({f for f in out.split("\0") if f and (root / f).is_file()})


def make_copy(files: Sequence[str], dest: Path) -> None:
    for f in files:
        target = dest / f
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, target)


def _env(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(copy / d) if d else str(copy) for d in _PACKAGE_DIRS)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("HYPOTHESIS_PROFILE", None)  # the dev profile, as in the everyday suite
    return env


def verify_imports(copy: Path) -> None:
    """Fail loudly unless every package is imported from ``copy`` (not the editable install)."""
    code = "; ".join(f"import {p}; print({p}.__file__)" for p in _PACKAGES)
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=copy,
        env=_env(copy),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    stray = [path for path in out if not Path(path).resolve().is_relative_to(copy.resolve())]
    if stray:
        raise RuntimeError(f"packages imported from outside the copy {copy}: {stray}")


def run_suite(
    copy: Path, suite: str, *, stop_first: bool, deselect: Sequence[str] = ()
) -> tuple[int, list[str], float, str]:
    """Run pytest on ``suite`` in ``copy``: (returncode, failing ids, seconds, output tail)."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        suite,
        "-q",
        "-m",
        "not slow",
        "-p",
        "no:cacheprovider",
        "-rfE",
        f"--ignore={_SELF_TEST}",
    ]
    if stop_first:
        cmd.append("-x")
    for test_id in deselect:
        cmd += ["--deselect", test_id]
    start = time.perf_counter()
    proc = subprocess.run(
        cmd, check=False, cwd=copy, env=_env(copy), capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    failing = [m.group(2) for line in proc.stdout.splitlines() if (m := _RESULT_LINE.match(line))]
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
    return proc.returncode, failing, seconds, tail


def run_mutant(
    mutant: Mutant, files: Sequence[str], suite: str, deselect: Sequence[str]
) -> MutantResult:
    with tempfile.TemporaryDirectory(prefix=f"tent-mutant-{mutant.name}-") as tmp:
        copy = Path(tmp)
        make_copy(files, copy)
        apply_mutant(copy, mutant)
        verify_imports(copy)
        rc, failing, seconds, tail = run_suite(copy, suite, stop_first=True, deselect=deselect)
    if rc not in (0, 1):
        # Not a test failure (collection error, crash): the mutant or the suite is broken.
        print(f"mutant {mutant.name}: pytest exited {rc}\n{tail}", file=sys.stderr)
    return MutantResult(
        name=mutant.name,
        file=mutant.file,
        rule=mutant.rule,
        killed=rc == 1,
        seconds=round(seconds, 2),
        killed_by=failing[0] if rc == 1 and failing else None,
        returncode=rc,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], metavar="NAME")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--suite", default=DEFAULT_SUITE, help="pytest path(s), in the copy")
    args = parser.parse_args(argv)
    names = {m.name for m in MUTANTS}
    unknown = set(args.only) - names
    if unknown:
        parser.error(f"unknown mutant(s) {sorted(unknown)}; known: {sorted(names)}")
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    selected = [m for m in MUTANTS if not args.only or m.name in args.only]
    for mutant in MUTANTS:  # every mutant must still apply, selected or not
        for edit in mutant.edits:
            check_edit(ROOT, edit)

    started = time.perf_counter()
    files = repo_files(ROOT)
    with tempfile.TemporaryDirectory(prefix="tent-mutant-baseline-") as tmp:
        copy = Path(tmp)
        make_copy(files, copy)
        verify_imports(copy)
        base_rc, base_failing, base_seconds, base_tail = run_suite(
            copy, args.suite, stop_first=False
        )
    if base_rc not in (0, 1):
        print(f"baseline: pytest exited {base_rc}\n{base_tail}", file=sys.stderr)
        return 2

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda m: run_mutant(m, files, args.suite, base_failing), selected))
    killed = sum(r.killed for r in results)
    report = {
        "killed": killed,
        "total": len(results),
        "mutants": [
            {
                "name": r.name,
                "file": r.file,
                "rule": r.rule,
                "killed": r.killed,
                "seconds": r.seconds,
                "killed_by": r.killed_by,
            }
            for r in results
        ],
        "survivors": [r.name for r in results if not r.killed],
        "suite": args.suite,
        "baseline": {
            "seconds": round(base_seconds, 2),
            "deselected_failures": base_failing,
        },
        "seconds": round(time.perf_counter() - started, 2),
    }
    print(json.dumps(report))
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
