"""CrossHair contract checks of the pure core functions (docs/design.md#pipeline, stage 5).

The contracts are PEP 316 docstring conditions (``pre:`` / ``post:`` / ``raises:``) written on
the functions themselves, so a reader sees them next to the code:

* ``tent_credit._arith.checked_add`` / ``checked_sub``: the exact sum/difference, never outside
  u64 (docs/design.md#principle-6: overflow is an error, never a wrap);
* ``tent_sched._mlu.deadline_mlu``: never negative, 0 without a deadline or a usable bandwidth,
  DBL_MAX when past due (docs/semantics.md#mlu);
* ``tent_credit._types.normalise_charge_parts``: charge normalisation keeps the parts and sorts
  them with unique resources;
* ``tent_credit._ledger.update_acceptance``: the acceptance rule of
  docs/semantics.md#sender-ledger (duplicate/old before monotonicity, gaps only after the first
  update);
* ``tent_credit._grant_plan.compute_grant``: the all-or-nothing grant of
  docs/semantics.md#receiver-allocator.

:func:`crosshair_command` is the exact command CI runs; :func:`run_crosshair` runs it. The
budget: each condition gets at most :data:`PER_CONDITION_TIMEOUT_S` seconds and stops earlier
after :data:`MAX_UNINTERESTING_ITERATIONS` iterations without new coverage; on this machine the
six targets take about two minutes, and a planted wrong contract is refuted within seconds
(``tests/conformance/test_crosshair.py``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence

import attrs

from tent_models.checker import InvalidArgument

__all__ = [
    "CROSSHAIR_TARGETS",
    "MAX_UNINTERESTING_ITERATIONS",
    "PER_CONDITION_TIMEOUT_S",
    "CrosshairReport",
    "crosshair_command",
    "run_crosshair",
]

CROSSHAIR_TARGETS: tuple[str, ...] = (
    "tent_credit._arith.checked_add",
    "tent_credit._arith.checked_sub",
    "tent_sched._mlu.deadline_mlu",
    "tent_credit._types.normalise_charge_parts",
    "tent_credit._ledger.update_acceptance",
    "tent_credit._grant_plan.compute_grant",
)
"""Every function with contracts, as CrossHair targets (fully qualified names)."""

PER_CONDITION_TIMEOUT_S = 6
"""Seconds CrossHair may spend on one condition."""

MAX_UNINTERESTING_ITERATIONS = 150
"""Iterations without new coverage after which CrossHair moves on to the next condition."""


def crosshair_command(
    targets: Sequence[str] = CROSSHAIR_TARGETS,
    *,
    python: str | None = None,
    per_condition_timeout_s: int = PER_CONDITION_TIMEOUT_S,
    max_uninteresting_iterations: int = MAX_UNINTERESTING_ITERATIONS,
) -> tuple[str, ...]:
    """The ``crosshair check`` command line for ``targets`` (PEP 316 contracts, bounded time).

    ``python`` is the interpreter to run CrossHair with (default: the running one); the two
    budgets are per condition. Raises :class:`~tent_models.checker.InvalidArgument` when
    ``targets`` is empty or names an empty string, or a budget is below 1.
    """
    if not targets or any(not target for target in targets):
        raise InvalidArgument(f"crosshair needs non-empty targets, got {targets!r}")
    for name, budget in (
        ("per_condition_timeout_s", per_condition_timeout_s),
        ("max_uninteresting_iterations", max_uninteresting_iterations),
    ):
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise InvalidArgument(f"{name} must be an int >= 1, got {budget!r}")
    return (
        python or sys.executable,
        "-m",
        "crosshair",
        "check",
        "--analysis_kind=PEP316",
        f"--per_condition_timeout={per_condition_timeout_s}",
        f"--max_uninteresting_iterations={max_uninteresting_iterations}",
        *targets,
    )


@attrs.frozen(kw_only=True)
class CrosshairReport:
    """The outcome of one CrossHair run.

    ``returncode`` is CrossHair's (0: no counterexample, 1: counterexamples, 2: another error)
    or ``None`` when the run hit ``timeout_s``; ``counterexamples`` are its ``error:`` lines.
    """

    command: tuple[str, ...]
    returncode: int | None
    counterexamples: tuple[str, ...]
    output: str
    seconds: float

    @property
    def passed(self) -> bool:
        """True when CrossHair finished and found no counterexample."""
        return self.returncode == 0 and not self.counterexamples


def run_crosshair(
    targets: Sequence[str] = CROSSHAIR_TARGETS,
    *,
    cwd: str | None = None,
    timeout_s: float = 600.0,
    per_condition_timeout_s: int = PER_CONDITION_TIMEOUT_S,
    max_uninteresting_iterations: int = MAX_UNINTERESTING_ITERATIONS,
) -> CrosshairReport:
    """Run :func:`crosshair_command` for ``targets`` in a subprocess and collect its report.

    Counterexamples are values in the report, never exceptions. Raises
    :class:`~tent_models.checker.InvalidArgument` for empty targets or a budget below 1
    (nothing is run).
    """
    command = crosshair_command(
        targets,
        per_condition_timeout_s=per_condition_timeout_s,
        max_uninteresting_iterations=max_uninteresting_iterations,
    )
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as expired:
        partial = expired.stdout if isinstance(expired.stdout, str) else ""
        return CrosshairReport(
            command=command,
            returncode=None,
            counterexamples=_errors(partial),
            output=partial + f"\ncrosshair did not finish within {timeout_s} s",
            seconds=time.perf_counter() - started,
        )
    output = done.stdout + done.stderr
    return CrosshairReport(
        command=command,
        returncode=done.returncode,
        counterexamples=_errors(done.stdout),
        output=output,
        seconds=time.perf_counter() - started,
    )


def _errors(stdout: str) -> tuple[str, ...]:
    return tuple(line for line in stdout.splitlines() if ": error: " in line)
