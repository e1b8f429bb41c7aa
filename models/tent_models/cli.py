"""The ``tent`` command: model checks, known-bad refutations and z3 proofs for CI and for people.

Verbs:

* ``tent check``: runs the catalogue's ``ci`` targets (:mod:`tent_models.registry`; ``--deep``
  adds the deep models, ``--only GLOB`` picks targets by name), prints a table and the
  counterexample of every failure, writes ``--json`` / ``--junit`` reports, and exits 1 when any
  target failed. ``--simulate`` instead walks the deep models at random from a seed.
* ``tent manifest update``: re-measures the model configurations and rewrites the manifest of
  expected state counts (:mod:`tent_models.manifest`).
* ``tent spec diagram``: regenerates the state diagrams from the spec's tables
  (:mod:`tent_models.diagrams`); ``--check`` exits 1 when the checked-in pages are stale.

Exit codes: 0 success, 1 a failed target / stale artefact, 2 a usage error (click's).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from tent_models import diagrams, registry
from tent_models import manifest as manifest_file
from tent_models.checker import CheckResult, InvalidArgument, check, on_ray
from tent_models.manifest import Counts, Manifest, ManifestError
from tent_models.registry import Outcome, RunOptions, Target, TargetKind, Tier

__all__ = ["main"]

_WIDTH_WITHOUT_TERMINAL = 140  # CI logs: wide enough that target names never fold


def _console(*, stderr: bool = False) -> Console:
    console = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not console.is_terminal:  # a log, not a screen: never fold or elide target names
        console.width = max(console.width, _WIDTH_WITHOUT_TERMINAL)
    return console


@click.group()
@click.version_option(package_name="tent-protocol", prog_name="tent")
def main() -> None:
    """TENT protocol verification: model checks, z3 proofs and generated spec artefacts."""


# --- tent check -----------------------------------------------------------------------------------


@main.command("check")
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
@click.option("--list", "list_only", is_flag=True, help="List the selected targets and exit.")
@click.option(
    "--show-refutations",
    is_flag=True,
    help="Also print the expected counterexample of every refuted known-bad target.",
)
@click.option("--no-progress", is_flag=True, help="No live progress display (off without a TTY).")
@click.option(
    "--manifest",
    "manifest_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=manifest_file.DEFAULT_PATH,
    show_default="the packaged manifest.json",
    help="Manifest of expected state counts to compare with.",
)
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
    list_only: bool,
    show_refutations: bool,
    no_progress: bool,
    manifest_path: Path,
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
    console = _console(stderr=to_stdout)
    if simulate:
        targets = tuple(
            t
            for t in registry.select(registry.catalogue(), only=only, deep=True)
            if t.kind is TargetKind.MODEL and t.tier is Tier.DEEP
        )
    else:
        targets = registry.select(registry.catalogue(), only=only, deep=deep)
    if not targets:
        raise click.UsageError(
            "no target matches the selection"
            + (f" {list(only)}" if only else "")
            + (" (--simulate runs deep models only)" if simulate else "")
        )
    if list_only:
        console.print(_targets_table(targets))
        return
    try:
        expected = manifest_file.load(manifest_path)
    except ManifestError as exc:
        raise click.ClickException(str(exc)) from exc
    progress = console.is_terminal and not no_progress
    options = RunOptions(
        workers=workers,
        plain=plain,
        progress=progress and not to_stdout,  # the checker's own display uses stdout
        manifest=expected,
    )
    started = time.perf_counter()
    if simulate:

        def runner(target: Target) -> Outcome:
            return registry.simulate_target(target, seed=seed, walks=walks, depth=depth)

    else:

        def runner(target: Target) -> Outcome:
            return registry.run_target(target, options)

    with contextlib.ExitStack() as stack:
        if ray_address:
            try:
                stack.enter_context(on_ray(ray_address))
            except InvalidArgument as exc:
                raise click.ClickException(str(exc)) from exc
        outcomes = _run_all(targets, runner, console=console, progress=progress)
    seconds = time.perf_counter() - started
    for outcome in outcomes:
        if not outcome.passed or (show_refutations and outcome.refutation):
            _print_detail(console, outcome)
    title = "tent check --simulate" if simulate else "tent check"
    console.print(_outcomes_table(outcomes, title=title))
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
    if failed:
        sys.exit(1)


def _run_all(
    targets: Sequence[Target],
    runner: Callable[[Target], Outcome],
    *,
    console: Console,
    progress: bool,
) -> list[Outcome]:
    """Run every target in order; with ``progress``, a live bar and one line per finished one."""
    if not progress:
        return [runner(target) for target in targets]
    outcomes = []
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("tent check", total=len(targets))
        for target in targets:
            bar.update(task, description=target.name)
            outcome = runner(target)
            outcomes.append(outcome)
            mark = Text("✓ ", style="green") if outcome.passed else Text("✗ ", style="red")
            bar.console.print(
                mark + Text(f"{target.name}: {outcome.verdict} ({outcome.seconds:.1f} s)")
            )
            bar.advance(task)
    return outcomes


def _print_detail(console: Console, outcome: Outcome) -> None:
    style = "green" if outcome.passed else "red"
    console.rule(Text(f"{outcome.target}: {outcome.verdict}", style=style))
    if outcome.message:
        console.print(Text(outcome.message))
    if outcome.report:
        console.print(Text(outcome.report))
    console.print()


def _number(value: int | float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _outcomes_table(outcomes: Sequence[Outcome], *, title: str) -> Table:
    table = Table(title=title)
    table.add_column("target", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    for heading in ("states", "transitions", "depth", "seconds", "states/s"):
        table.add_column(heading, justify="right", no_wrap=True)
    table.add_column("result", no_wrap=True)
    for o in outcomes:
        table.add_row(
            o.target,
            o.kind.value,
            _number(o.states, ","),
            _number(o.transitions, ","),
            _number(o.depth, "d"),
            f"{o.seconds:.2f}",
            _number(o.states_per_second, ",.0f"),
            Text(o.verdict, style="green" if o.passed else "bold red"),
        )
    return table


def _targets_table(targets: Sequence[Target]) -> Table:
    table = Table(title=f"{len(targets)} target(s)")
    table.add_column("target", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("tier", no_wrap=True)
    table.add_column("what it checks")
    for t in targets:
        table.add_row(t.name, t.kind.value, t.tier.value, t.description)
    return table


def _write(path: str, text: str) -> None:
    if path == "-":
        click.echo(text, nl=False)
        return
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror}") from exc


# --- reports --------------------------------------------------------------------------------------


def _plain(value: object) -> Any:
    """A JSON-safe copy of a trace value (tuples become lists; anything exotic its repr)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return repr(value)


def _violations(result: CheckResult | None) -> list[dict[str, Any]]:
    if result is None:
        return []
    return [
        {
            "kind": v.kind.value,
            "name": v.name,
            "cites": v.cites,
            "detail": v.detail,
            "actions": [[action, _plain(args)] for action, args in v.actions],
        }
        for v in result.violations
    ]


def json_report(outcomes: Sequence[Outcome], seconds: float, *, mode: str) -> dict[str, Any]:
    """The ``--json`` document: totals, then one object per target in run order.

    Each target object has ``name``, ``kind``, ``tier``, ``passed``, ``result`` (the verdict),
    ``seconds``, the counts (``null`` for proofs), ``message``, ``counterexample`` (the printed
    text or ``null``) and ``violations`` (kind, name, cites, detail and the replayable
    ``[action, args]`` list of each).
    """
    failed = sum(not o.passed for o in outcomes)
    return {
        "mode": mode,
        "ok": failed == 0,
        "seconds": round(seconds, 3),
        "passed": len(outcomes) - failed,
        "failed": failed,
        "targets": [
            {
                "name": o.target,
                "kind": o.kind.value,
                "tier": o.tier.value,
                "passed": o.passed,
                "result": o.verdict,
                "seconds": round(o.seconds, 3),
                "states": o.states,
                "transitions": o.transitions,
                "depth": o.depth,
                "states_per_second": None
                if o.states_per_second is None
                else round(o.states_per_second, 1),
                "message": o.message,
                "counterexample": o.report or None,
                "violations": _violations(o.result),
            }
            for o in outcomes
        ],
    }


def junit_report(outcomes: Sequence[Outcome], seconds: float, *, name: str) -> str:
    """The ``--junit`` document: one ``testcase`` per target (``classname`` ``tent.<kind>``).

    A failed target carries a ``failure`` element (an ``error`` element when it raised) whose
    ``message`` is the verdict and one-line reason and whose text is the counterexample.
    """
    failures = sum(not o.passed and o.verdict != "error" for o in outcomes)
    errors = sum(o.verdict == "error" for o in outcomes)
    counts = {
        "name": name,
        "tests": str(len(outcomes)),
        "failures": str(failures),
        "errors": str(errors),
        "time": f"{seconds:.3f}",
    }
    root = ET.Element("testsuites", counts)
    suite = ET.SubElement(root, "testsuite", counts)
    for o in outcomes:
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": f"tent.{o.kind.value}", "name": o.target, "time": f"{o.seconds:.3f}"},
        )
        summary = o.verdict + (f": {o.message}" if o.message else "")
        if not o.passed:
            element = "error" if o.verdict == "error" else "failure"
            failure = ET.SubElement(case, element, {"message": summary, "type": o.verdict})
            failure.text = o.report or o.message
        else:
            out = ET.SubElement(case, "system-out")
            out.text = summary if o.states is None else f"{summary}, {o.states:,} states"
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


# --- tent manifest ------------------------------------------------------------------------------


@main.group("manifest")
def manifest_group() -> None:
    """The manifest of expected state counts per model configuration."""


@manifest_group.command("update")
@click.option(
    "--only", "only", multiple=True, metavar="GLOB", help="Re-measure only matching models."
)
@click.option("--deep", is_flag=True, help="Also measure the deep models (optional entries).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--manifest",
    "manifest_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=manifest_file.DEFAULT_PATH,
    show_default="the packaged manifest.json",
)
def manifest_update(
    *, only: tuple[str, ...], deep: bool, workers: int, manifest_path: Path
) -> None:
    """Re-measure the tiny and ci models (and deep with --deep) and rewrite the manifest.

    Entries of models not selected are kept; a full update (no --only) also drops entries of
    models no longer in the catalogue. A model whose exploration is not exhaustive (it stopped
    at a violation) is not recorded, and the command exits 1.
    """
    console = _console()
    catalogue = registry.catalogue()
    targets = [
        t
        for t in registry.select(catalogue, only=only or ("*",), deep=deep)
        if t.kind is TargetKind.MODEL
    ]
    if not targets:
        raise click.UsageError(f"no model matches the selection {list(only)}")
    if manifest_path.exists():
        try:
            old = manifest_file.load(manifest_path)
        except ManifestError as exc:
            raise click.ClickException(str(exc)) from exc
    else:
        old = Manifest()
    table = Table(title=f"tent manifest update ({manifest_path.name})")
    for heading in ("model", "manifest", "measured", "status"):
        table.add_column(heading, no_wrap=heading != "status")
    updates: dict[str, Counts] = {}
    unrecorded = 0
    for target in targets:
        assert target.model is not None  # every model target has its factory
        result = check(target.model(), workers=workers, progress=console.is_terminal)
        previous = old.models.get(target.name)
        before = "-" if previous is None else previous.describe()
        if not result.exhaustive:
            unrecorded += 1
            table.add_row(
                target.name, before, "-", Text("not exhaustive: not recorded", style="red")
            )
            continue
        counts = Counts(
            distinct_states=result.distinct_states,
            transitions=result.transitions,
            depth=result.depth,
        )
        updates[target.name] = counts
        status = "new" if previous is None else "unchanged" if previous == counts else "changed"
        if result.violations:
            status += f" ({len(result.violations)} violation(s): see tent check)"
        table.add_row(target.name, before, counts.describe(), status)
    new = old.with_counts(updates)
    if not only:
        known = {t.name for t in catalogue if t.kind is TargetKind.MODEL}
        new = Manifest(models={k: v for k, v in new.models.items() if k in known})
    console.print(table)
    if new != old or not manifest_path.exists():
        try:
            manifest_file.save(new, manifest_path)
        except ManifestError as exc:
            raise click.ClickException(str(exc)) from exc
        console.print(f"wrote {manifest_path}")
    else:
        console.print(f"{manifest_path} is up to date")
    if unrecorded:
        sys.exit(1)


# --- tent spec ----------------------------------------------------------------------------------


@main.group("spec")
def spec_group() -> None:
    """Artefacts generated from the executable specification."""


@spec_group.command("diagram")
@click.option(
    "--check",
    "check_only",
    is_flag=True,
    help="Write nothing; exit 1 when the checked-in pages are stale.",
)
@click.option(
    "--out",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=diagrams.DEFAULT_DIRECTORY,
    show_default=True,
    help="Folder of the generated pages (relative to the repository root).",
)
def spec_diagram(*, check_only: bool, directory: Path) -> None:
    """Generate Mermaid state diagrams (MyST pages) from the spec's transition tables."""
    console = _console()
    if check_only:
        stale = diagrams.stale(directory)
        if stale:
            console.print(
                Text(
                    f"stale diagram page(s) in {directory}: {', '.join(stale)}; "
                    "regenerate with `tent spec diagram`",
                    style="red",
                )
            )
            sys.exit(1)
        console.print(f"{directory}: {len(diagrams.pages())} page(s) up to date")
        return
    try:
        changed = diagrams.write(directory)
    except OSError as exc:
        raise click.ClickException(f"cannot write {directory}: {exc.strerror}") from exc
    if changed:
        console.print(f"{directory}: updated {', '.join(changed)}")
    else:
        console.print(f"{directory}: {len(diagrams.pages())} page(s) up to date")


def _register_trace_commands() -> None:
    # `tent trace validate FILE...` lives beside the trace format it reads.
    from tent_models.trace import trace_cli  # noqa: PLC0415 - keeps `tent --help` light

    main.add_command(trace_cli)


_register_trace_commands()
