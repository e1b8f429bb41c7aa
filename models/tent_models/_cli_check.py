"""``tent check``: run the selected targets, show their progress, print and write the results.

The command resolves what to run (:mod:`tent_models._cli_common`), checks up front that every
report path can be written, runs the targets one after another (exhaustively, or as seeded random
walks with ``--simulate``, locally or on Ray) behind one live progress line, then prints the
failures' details and the outcomes table and writes the ``--json`` / ``--junit`` / ``--html`` /
``--itf`` reports. It exits 1 when any target failed; :mod:`tent_models.cli` registers it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import click
from rich.console import Console
from rich.progress import (
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from tent_models import manifest as manifest_file
from tent_models import registry
from tent_models._cli_common import make_console, model_options, target_source
from tent_models.checker import InvalidArgument, on_ray
from tent_models.manifest import Manifest, ManifestError
from tent_models.registry import Outcome, RunOptions, Target, TargetKind, Tier
from tent_models.report import _command as report_command
from tent_models.reports import json_report, junit_report
from tent_models.sources import citation_legend
from tent_models.tables import check_summary, outcomes_table, targets_table

__all__ = ["check_command"]


@click.command("check")
@click.option("--deep", is_flag=True, help="Also run the deep model configurations.")
@click.option(
    "--only",
    "only",
    multiple=True,
    metavar="GLOB",
    help="Run only targets whose name matches (repeatable; any tier but deep without --deep).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Checker processes per model (the seen set is sharded by fingerprint, a state is "
    "expanded where it was generated; identical results; 1 is the serial engine).",
)
@click.option(
    "--plain",
    is_flag=True,
    help="Hide the models' optional fast path: explore through the readable spec methods only "
    "(same states and verdicts, slower; a cross-check of the fast path).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Write a JSON report to FILE ('-' for stdout; the table then goes to stderr).",
)
@click.option(
    "--junit",
    "junit_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Write a JUnit XML report to FILE (one testcase per target; '-' for stdout).",
)
@click.option(
    "--html",
    "html_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write DIR/index.html: one offline page with the summary and a sequence chart of "
    "every counterexample, refutation and witness (docs/charts.md).",
)
@click.option(
    "--itf",
    "itf_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write every counterexample and witness trace into DIR as an ITF (Informal Trace "
    "Format) JSON file, for Apalache and Quint tools (docs/charts.md).",
)
@click.option("--list", "list_only", is_flag=True, help="List the selected targets and exit.")
@click.option(
    "--show-refutations",
    is_flag=True,
    help="Also print the expected counterexample of every refuted known-bad target, and each "
    "guard ablation's verdict with the model that refuted it or the written reason it survives.",
)
@click.option("--no-progress", is_flag=True, help="No live progress display (off without a TTY).")
@click.option(
    "--no-deadlock",
    is_flag=True,
    help="Judge no deadlocks: a state without successors passes (as TLC's -deadlock and "
    "Apalache's --no-deadlock). To keep the check, declare finished states with is_terminal.",
)
@click.option(
    "--manifest",
    "manifest_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    show_default="the packaged manifest.json, or [tool.tent] manifest for a project's models",
    help="Manifest of expected state counts to compare with.",
)
@model_options
@click.option(
    "--simulate",
    is_flag=True,
    help="Seeded random simulation of the deep models instead of exhaustive checks.",
)
@click.option(
    "--walks",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Random walks per model (--simulate).",
)
@click.option(
    "--depth",
    type=click.IntRange(min=0),
    default=200,
    show_default=True,
    help="Steps per walk at most (--simulate).",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Simulation seed (--simulate)."
)
@click.option(
    "--ray",
    "ray_address",
    metavar="ADDRESS",
    help="Run on a Ray cluster ('auto', 'ray://host:port', 'local'): exhaustive checks shard "
    "the seen set over one actor per cluster CPU, --simulate runs a swarm of seeded walks as "
    "Ray tasks. Needs the [ray] extra.",
)
def check_command(
    *,
    deep: bool,
    only: tuple[str, ...],
    workers: int,
    plain: bool,
    json_path: str | None,
    junit_path: str | None,
    html_dir: Path | None,
    itf_dir: Path | None,
    list_only: bool,
    show_refutations: bool,
    no_progress: bool,
    no_deadlock: bool,
    manifest_path: Path | None,
    model_specs: tuple[str, ...],
    project_file: Path | None,
    simulate: bool,
    walks: int,
    depth: int,
    seed: int,
    ray_address: str | None,
) -> None:
    """Check the shipped models, refute the known-bad variants and run the z3 proofs.

    Without --only, runs every `ci` target (and the deep ones with --deep). A target fails on a
    violation, a non-exhaustive exploration, counts that differ from the manifest, a known-bad
    variant that is not refuted by its named invariant, or a proof that does not hold. Exits 1
    when any target failed.
    """
    if json_path == junit_path == "-":
        raise click.UsageError("only one of --json and --junit can write to stdout")
    to_stdout = "-" in (json_path, junit_path)  # the report owns stdout; people read stderr
    for option, path in (("--json", json_path), ("--junit", junit_path)):
        _check_writable(option, path)  # before the run, not after minutes of it
    for option, folder in (("--html", html_dir), ("--itf", itf_dir)):
        report_command.check_folder(option, folder)
    console = make_console(stderr=to_stdout)
    source = target_source(model_specs, project_file, manifest_path)
    if simulate:
        targets = tuple(
            t
            for t in registry.select(source.targets, only=only, deep=True)
            if t.kind is TargetKind.MODEL and (source.user or t.tier is Tier.DEEP)
        )
    else:
        targets = registry.select(source.targets, only=only, deep=deep)
    if not targets:
        raise click.UsageError(
            "no target matches the selection"
            + (f" {list(only)}" if only else "")
            + (" (--simulate runs deep models only)" if simulate else "")
        )
    if list_only:
        console.print(targets_table(targets))
        for line in citation_legend(t.description for t in targets):
            console.print(line, highlight=False, soft_wrap=True)
        return
    try:
        expected = Manifest() if source.manifest is None else manifest_file.load(source.manifest)
    except ManifestError as exc:
        raise click.ClickException(str(exc)) from exc
    progress = console.is_terminal and not no_progress
    options = RunOptions(workers=workers, plain=plain, no_deadlock=no_deadlock, manifest=expected)
    started = time.perf_counter()
    if simulate:

        def runner(target: Target, hook: _StatesHook | None) -> Outcome:
            del hook  # walks report no running count
            return registry.simulate_target(target, seed=seed, walks=walks, depth=depth)

    else:

        def runner(target: Target, hook: _StatesHook | None) -> Outcome:
            run_options = options if hook is None else attrs.evolve(options, progress=hook)
            return registry.run_target(target, run_options)

    with contextlib.ExitStack() as stack:
        if ray_address:
            try:
                stack.enter_context(on_ray(ray_address))
            except InvalidArgument as exc:
                raise click.ClickException(str(exc)) from exc
        outcomes = _run_all(targets, runner, console=console, progress=progress)
    seconds = time.perf_counter() - started
    for outcome in outcomes:
        shown_anyway = outcome.refutation or outcome.kind is TargetKind.ABLATION
        if not outcome.passed or (show_refutations and shown_anyway):
            _print_detail(console, outcome)
    title = "tent check --simulate" if simulate else "tent check"
    console.print(outcomes_table(outcomes, title=title, width=console.width))
    failed = [o for o in outcomes if not o.passed]
    summary = (
        f"{len(outcomes)} target(s): {len(outcomes) - len(failed)} passed, {len(failed)} failed "
        f"in {seconds:.1f} s"
    )
    console.print(Text(summary, style="bold red" if failed else "bold green"))
    mode = "simulation" if simulate else "check"
    if json_path is not None:
        _write(json_path, json.dumps(json_report(outcomes, seconds, mode=mode), indent=2) + "\n")
    if junit_path is not None:
        _write(junit_path, junit_report(outcomes, seconds, name=title))
    report_command.write_artefacts(
        console, outcomes, seconds, title=title, html_dir=html_dir, itf_dir=itf_dir
    )
    if failed:
        sys.exit(1)


_StatesHook = Callable[[int, int, int], None]  # (distinct, transitions, depth) of a model check


def _run_all(
    targets: Sequence[Target],
    runner: Callable[[Target, _StatesHook | None], Outcome],
    *,
    console: Console,
    progress: bool,
) -> list[Outcome]:
    """Run every target in order and print one line per target as it finishes.

    With ``progress`` the lines scroll above one live line, the only display of the run (the
    checker's own is replaced by a hook into it): targets done of all, the distinct states
    explored so far in the whole run, one clock, and the target running. Without (a CI log) the
    lines are the only output until the table, so a long run shows where it is.
    """
    if not progress:
        outcomes = []
        for index, target in enumerate(targets, start=1):
            outcome = runner(target, None)
            outcomes.append(outcome)
            console.print(_finished_line(outcome, f"[{index}/{len(targets)}] "))
        return outcomes
    outcomes = []
    columns = (SpinnerColumn(), TimeElapsedColumn(), TextColumn("{task.description}"))
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("tent check", total=len(targets))
        explored = 0  # distinct states of the targets finished so far

        def show(name: str, states: int) -> None:
            line = f"{len(outcomes)}/{len(targets)} targets, {states:,} states: {name}"
            room = bar.console.width - _PROGRESS_PREFIX  # the counts stay, the name's end goes
            bar.update(task, description=line if len(line) <= room else line[: room - 1] + "…")

        for target in targets:
            show(target.name, explored)

            def hook(
                distinct: int,
                transitions: int,
                depth: int,
                base: int = explored,
                name: str = target.name,
            ) -> None:
                del transitions, depth
                show(name, base + distinct)

            outcome = runner(target, hook)
            explored += outcome.states or 0
            outcomes.append(outcome)
            bar.console.print(_finished_line(outcome))
            bar.advance(task)
    return outcomes


_PROGRESS_PREFIX = 12  # the spinner and the clock, with their spaces


def _finished_line(outcome: Outcome, prefix: str = "") -> Text:
    """``✓ name: verdict (seconds)``, then what a passing model covered, or why an ablated guard
    survived (the written reason: a pass that rests on it should be read)."""
    mark = Text("✓ ", style="green") if outcome.passed else Text("✗ ", style="red")
    line = (
        Text(prefix) + mark + Text(f"{outcome.target}: {outcome.verdict} ({outcome.seconds:.1f} s)")
    )
    if outcome.passed and outcome.kind is TargetKind.MODEL:
        summary = check_summary(outcome)
        if summary:
            line += Text(f": {summary}", style="dim")
    elif outcome.passed and outcome.verdict in ("survived", "inconclusive"):
        line += Text(f": {outcome.message.split(' (')[0]}", style="dim")  # the reason only
    return line


def _print_detail(console: Console, outcome: Outcome) -> None:
    style = "green" if outcome.passed else "red"
    console.rule(Text(f"{outcome.target}: {outcome.verdict}", style=style))
    # A violated model's or refuted variant's message only names the violation, as the report's
    # heading does; other messages say more than the report (what was expected instead).
    if outcome.message and not (outcome.report and outcome.verdict in ("violated", "refuted")):
        console.print(Text(outcome.message))
    if outcome.report:
        console.print(Text(outcome.report))
    console.print()


def _check_writable(option: str, path: str | None) -> None:
    """Fail fast (a usage error) when a report could not be written to ``path`` after a run:
    its folder is missing or read-only, or it names a folder or a read-only file. Writes
    nothing."""
    if path is None or path == "-":
        return
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    problem = None
    if target.is_dir():
        problem = "it is a folder"
    elif not folder.is_dir():
        problem = f"the folder {folder} does not exist"
    elif target.exists() and not os.access(target, os.W_OK):
        problem = "the file is not writable"
    elif not target.exists() and not os.access(folder, os.W_OK | os.X_OK):
        problem = f"the folder {folder} is not writable"
    if problem is not None:
        raise click.BadParameter(f"cannot write {path}: {problem}", param_hint=option)


def _write(path: str, text: str) -> None:
    if path == "-":
        click.echo(text, nl=False)
        return
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror}") from exc
