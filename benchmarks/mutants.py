"""Proof that the checks bite: semantic and tool-generated mutants against the test suite.

Two kinds of mutants of ``tent_credit`` and ``tent_sched``:

- **semantic** (``benchmarks/tent_mutants/catalogue_*.py``): hand-written, each breaking one
  named rule of docs/semantics.md / the credit RFC / issue 10, in one of the defect classes
  (boundary flip, validate after mutate, wrong key, missing bound, missing check, untrusted
  formatting, half applied, epoch bound, overflow near 2**64, wrong rule). Every one must be killed.
- **tool** (cosmic-ray's operators): a seeded sample of ``--tool-sample`` mutations per package,
  reproducible with ``--seed``. Survivors are listed; some are equivalent mutants.

The unmutated copy runs the whole suite (``tests`` and ``docs``, ``-m "not slow and not
transport"``) once under per-test coverage contexts (cached by content); each mutant then runs
only the tests that execute its lines, the conformance suite's first. The report gives two kill
rates: by the conformance suite (``tests/conformance``) alone and by the whole suite.

Mutants are applied to temporary copies, never to the checkout. Prints one JSON document;
exits 1 if a semantic mutant survived (bar those shown equivalent, with their reason),
0 otherwise.

    python benchmarks/mutants.py --jobs 2 --tool-sample 25 --seed 2519 > mutants.json
    python benchmarks/mutants.py --only equal_sequence_is_new --tool-sample 0   # one mutant
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tent_mutants import catalogue_credit, catalogue_receiver, catalogue_sched, runner, tool
from tent_mutants.model import (
    AnyMutant,
    DefectClass,
    Edit,
    Mutant,
    MutantRotError,
    ToolMutant,
    apply_mutant,
    check_edit,
)

ROOT = Path(__file__).resolve().parent.parent
MUTANTS: tuple[Mutant, ...] = (
    catalogue_credit.MUTANTS + catalogue_receiver.MUTANTS + catalogue_sched.MUTANTS
)
DEFAULT_SEED = 2519
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "tent-mutants-cache"

__all__ = [
    "MUTANTS",
    "DefectClass",
    "Edit",
    "Mutant",
    "MutantRotError",
    "ToolMutant",
    "apply_mutant",
    "check_edit",
    "select_mutants",
]


def tool_mutants(root: Path, *, seed: int, per_package: int) -> list[ToolMutant]:
    """The seeded sample of cosmic-ray mutants (none if ``per_package`` is 0)."""
    if per_package <= 0:
        return []
    every = tool.enumerate_mutants(root, tool.module_files(root))
    return tool.sample(every, seed=seed, per_package=per_package)


def select_mutants(
    root: Path,
    *,
    only: Sequence[str] = (),
    semantic: bool = True,
    tool_sample: int = 0,
    seed: int = DEFAULT_SEED,
    max_mutants: int | None = None,
) -> list[AnyMutant]:
    chosen: list[AnyMutant] = list(MUTANTS) if semantic else []
    chosen += tool_mutants(root, seed=seed, per_package=tool_sample)
    if only:
        unknown = set(only) - {m.ident for m in chosen}
        if unknown:
            raise click.BadParameter(f"unknown mutant(s) {sorted(unknown)}", param_hint="--only")
        chosen = [m for m in chosen if m.ident in only]
    return chosen[:max_mutants] if max_mutants is not None else chosen


@click.command(help=(__doc__ or "").split("\n\n")[0])
@click.option("--only", multiple=True, metavar="NAME", help="a semantic name or a tool ident")
@click.option("--semantic/--no-semantic", default=True, show_default=True)
@click.option(
    "--tool-sample",
    type=click.IntRange(min=0),
    default=25,
    show_default=True,
    help="cosmic-ray mutants drawn per package",
)
@click.option("--seed", type=int, default=DEFAULT_SEED, show_default=True)
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--suite",
    multiple=True,
    metavar="PATH",
    help="pytest paths of the whole suite (default: tests docs)",
)
@click.option(
    "--budget-s",
    type=click.FloatRange(min=0),
    default=None,
    help="start no mutant after this many seconds (the rest are reported not_run)",
)
@click.option("--max-mutants", type=click.IntRange(min=1), default=None)
@click.option(
    "--cache-dir",
    type=click.Path(path_type=Path),
    default=DEFAULT_CACHE,
    show_default=True,
    help="where the coverage map is cached",
)
@click.option("--no-cache", is_flag=True, help="always measure the coverage map")
@click.option(
    "--coverage-map",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="reuse this cached map as-is (resuming a cut run; tests added since are not selected)",
)
@click.option("--list", "list_only", is_flag=True, help="print the selected mutants and exit")
@click.option(
    "--merge",
    "merge_files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="print one report of these earlier reports (a cut run and its resumption) and exit",
)
def main(  # noqa: PLR0917 (click passes every option as an argument)
    only: tuple[str, ...],
    semantic: bool,
    tool_sample: int,
    seed: int,
    jobs: int,
    suite: tuple[str, ...],
    budget_s: float | None,
    max_mutants: int | None,
    cache_dir: Path,
    no_cache: bool,
    coverage_map: Path | None,
    list_only: bool,
    merge_files: tuple[Path, ...],
) -> None:
    if merge_files:
        docs = [json.loads(f.read_text(encoding="utf-8")) for f in merge_files]
        click.echo(json.dumps(runner.merge(docs)))
        return
    mutants = select_mutants(
        ROOT,
        only=only,
        semantic=semantic,
        tool_sample=tool_sample,
        seed=seed,
        max_mutants=max_mutants,
    )
    if list_only:
        for m in mutants:
            click.echo(f"{m.ident}\t{m.describe(ROOT)}")
        return

    def progress(r: runner.Result) -> None:
        mark = "C" if r.by_conformance else ("S" if r.by_suite else "-")
        click.echo(f"[{mark}] {r.outcome:11} {r.seconds:7.1f}s {r.ident}", err=True)

    report = runner.run(
        ROOT,
        mutants,
        suite=suite or runner.DEFAULT_SUITE,
        jobs=jobs,
        budget_s=budget_s,
        cache_dir=None if no_cache else cache_dir,
        reuse_coverage=coverage_map,
        progress=progress,
    )
    report["seed"] = seed
    report["tool_sample_per_package"] = tool_sample
    click.echo(json.dumps(report))
    equivalent = {m.name for m in MUTANTS if m.equivalent}
    semantic_survivors = [
        s
        for s in report["survivors"]  # type: ignore[attr-defined]
        if s["kind"] == "semantic" and s["mutant"] not in equivalent
    ]
    sys.exit(1 if semantic_survivors else 0)


if __name__ == "__main__":
    main()
