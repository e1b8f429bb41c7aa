"""CrossHair contract checks: the real contracts hold, and CrossHair refutes planted wrong ones."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from tent_models.checker import InvalidArgument as CheckerInvalidArgument
from tent_models.contracts import (
    CROSSHAIR_TARGETS,
    MAX_UNINTERESTING_ITERATIONS,
    PER_CONDITION_TIMEOUT_S,
    crosshair_command,
    run_crosshair,
)

from tent_credit import CreditCharge, CreditResource
from tent_credit.errors import InvalidArgument

PLANTED = Path(__file__).with_name("crosshair_planted.py")
PLANTED_FUNCTIONS = ("checked_add", "compute_grant", "update_acceptance")


def _resolve(target: str) -> object:
    module, _, name = target.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("target", CROSSHAIR_TARGETS)
def test_every_target_resolves_and_states_postconditions(target: str) -> None:
    doc = getattr(_resolve(target), "__doc__", None) or ""
    assert any(line.strip().startswith("post: ") for line in doc.splitlines()), target


def test_the_command_checks_pep316_contracts_with_a_per_condition_timeout() -> None:
    command = crosshair_command(("pkg.mod.f",), python="python3")
    assert command == (
        "python3",
        "-m",
        "crosshair",
        "check",
        "--analysis_kind=PEP316",
        f"--per_condition_timeout={PER_CONDITION_TIMEOUT_S}",
        f"--max_uninteresting_iterations={MAX_UNINTERESTING_ITERATIONS}",
        "pkg.mod.f",
    )
    assert crosshair_command()[-len(CROSSHAIR_TARGETS) :] == CROSSHAIR_TARGETS


def test_the_command_refuses_empty_targets_and_budgets_below_one() -> None:
    with pytest.raises(CheckerInvalidArgument):
        crosshair_command(())
    with pytest.raises(CheckerInvalidArgument):
        crosshair_command(("",))
    for budget in (0, -1, True, 1.5):
        with pytest.raises(CheckerInvalidArgument):
            crosshair_command(("pkg.mod.f",), per_condition_timeout_s=budget)  # type: ignore[arg-type]
        with pytest.raises(CheckerInvalidArgument):
            crosshair_command(("pkg.mod.f",), max_uninteresting_iterations=budget)  # type: ignore[arg-type]
    assert "--per_condition_timeout=60" in crosshair_command(("m.f",), per_condition_timeout_s=60)


def test_crosshair_refutes_every_planted_wrong_contract() -> None:
    # Proof that the run explores: each planted postcondition is false for some input.
    # CrossHair finds each within seconds on an idle machine, but its budget is wall time:
    # under CI's load the 6 s default once ran out before compute_grant's counterexample.
    # A refuted condition stops at its first counterexample, so a larger budget costs
    # nothing unless the search is slow.
    report = run_crosshair(
        (str(PLANTED),),
        timeout_s=300,
        per_condition_timeout_s=60,
        max_uninteresting_iterations=5000,
    )
    assert report.returncode == 1, report.output
    refuted = {
        name
        for name in PLANTED_FUNCTIONS
        for line in report.counterexamples
        if f"when calling {name}(" in line
    }
    assert refuted == set(PLANTED_FUNCTIONS), report.output


@pytest.mark.slow
def test_crosshair_finds_no_counterexample_in_the_core_contracts() -> None:
    # About two minutes on 2 cores: six targets, 16 conditions, at most 6 s each.
    report = run_crosshair(timeout_s=400)
    assert report.passed, report.output


def test_charge_normalisation_rejects_an_unhashable_resource_with_a_typed_error() -> None:
    # Found while writing the contract: CreditCharge.of used to hash the resources before
    # checking their type, so an unhashable one raised TypeError (docs/design.md#principle-8).
    with pytest.raises(InvalidArgument, match="unknown credit resource"):
        CreditCharge.of([([1], 5)])  # type: ignore[list-item]
    with pytest.raises(InvalidArgument, match="duplicate resource"):
        CreditCharge.of([(CreditResource.DATA_BYTES, 1), (CreditResource.DATA_BYTES, 2)])
    assert CreditCharge.of(
        {CreditResource.REQUEST_SLOTS: 1, CreditResource.DATA_BYTES: 4}
    ).parts == ((CreditResource.DATA_BYTES, 4), (CreditResource.REQUEST_SLOTS, 1))
