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
* ``tent spec charts``: draws each known-bad variant's counterexample for the spec-review
  pages (:mod:`tent_models.report._docs`); ``--check`` exits 1 when they are stale.

Exit codes: 0 success, 1 a failed target / stale artefact, 2 a usage error (click's).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import click
from rich.console import Console
from rich.progress import (
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from tent_models import diagrams, registry, rendering
from tent_models import manifest as manifest_file
from tent_models.checker import InvalidArgument, on_ray
from tent_models.manifest import Counts, Manifest, ManifestError
from tent_models.project import ProjectError, UserModel, find_pyproject, load_project, user_targets
from tent_models.registry import Outcome, RunOptions, Target, TargetKind, Tier
from tent_models.report import _command as report_command
from tent_models.reports import json_report, junit_report
from tent_models.sources import citation_legend
from tent_models.tables import check_summary, outcomes_table, targets_table

__all__ = ["main"]

_WIDTH_WITHOUT_TERMINAL = 140  # CI logs: wide enough that target names never fold


def _console(*, stderr: bool = False) -> Console:
    console = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not console.is_terminal:  # a log, not a screen: never fold or elide target names
        console.width = max(console.width, _WIDTH_WITHOUT_TERMINAL)
    return console


class _LazyGroup(click.Group):
    """The root group. ``tent sim`` and ``tent bench`` are defined in ``tent_transport`` and
    imported only when invoked or listed (docs/transport_design.md#verbs-placement): the checker
    never imports the I/O layer at module level. A lazy name whose module or attribute is not
    there (the transport not installed, or a group not built yet) is simply absent."""

    _LAZY: dict[str, tuple[str, str]] = {  # noqa: RUF012 (a class constant)
        "sim": ("tent_transport.cli", "sim"),
        "bench": ("tent_transport.cli", "bench"),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in self._LAZY:
            return command
        module_name, attribute = self._LAZY[cmd_name]
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return None
        found = getattr(module, attribute, None)
        return found if isinstance(found, click.Command) else None


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tent-protocol", prog_name="tent")
def main() -> None:
    """TENT protocol verification: model checks, z3 proofs and generated spec artefacts."""


# --- what to check: the shipped catalogue or a project's own models ----------------------------


def _model_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--model`` and ``--project``, shared by ``tent check`` and ``tent manifest update``."""
    command = click.option(
        "--project",
        "project_file",
        type=click.Path(dir_okay=False, exists=True, path_type=Path),
        default=None,
        help="The pyproject.toml whose [tool.tent] table lists the models to check (default: "
        "the nearest one above the current folder).",
    )(command)
    return click.option(
        "--model",
        "model_specs",
        multiple=True,
        metavar="MODULE:FACTORY",
        help="Check this model of your own instead of the shipped ones (repeatable; "
        "docs/own_protocol.md).",
    )(command)


@attrs.frozen(kw_only=True)
class _Source:
    """The pool of targets a run selects from, and the manifest it compares counts with."""

    targets: tuple[Target, ...]
    manifest: Path | None
    user: bool  # a project's own models, not the shipped catalogue


def _source(
    model_specs: Sequence[str], project_file: Path | None, manifest_path: Path | None
) -> _Source:
    """``--model`` specs, else the project's ``[tool.tent]`` models, else the catalogue.

    A project's models are compared with ``--manifest`` or the table's ``manifest`` (counts are
    reported, not compared, when neither is set); the catalogue with the packaged manifest.
    Raises :class:`click.UsageError` for any invalid spec or table, before anything runs.
    """
    pyproject = project_file or find_pyproject(Path.cwd())
    try:
        found = load_project(pyproject) if pyproject is not None else None
        if model_specs:
            users = tuple(UserModel(factory=spec) for spec in model_specs)
        elif found is not None and found.models:
            users = found.models
        else:
            return _Source(
                targets=registry.catalogue(),
                manifest=manifest_path or manifest_file.DEFAULT_PATH,
                user=False,
            )
        manifest = manifest_path or (found.manifest if found is not None else None)
        root = found.root if found is not None else Path.cwd()
        targets = user_targets(users, root=root, compare_counts=manifest is not None)
    except ProjectError as exc:
        raise click.UsageError(str(exc)) from exc
    return _Source(targets=targets, manifest=manifest, user=True)


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
@_model_options
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
    console = _console(stderr=to_stdout)
    source = _source(model_specs, project_file, manifest_path)
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
    default=None,
    show_default="the packaged manifest.json, or [tool.tent] manifest for a project's models",
)
@_model_options
def manifest_update(
    *,
    only: tuple[str, ...],
    deep: bool,
    workers: int,
    manifest_path: Path | None,
    model_specs: tuple[str, ...],
    project_file: Path | None,
) -> None:
    """Re-measure the tiny and ci models (and deep with --deep) and rewrite the manifest.

    Entries of models not selected are kept; a full update (no --only) also drops entries of
    models no longer in the catalogue. A model whose exploration is not exhaustive (it stopped
    at a violation) is not recorded, and the command exits 1.
    """
    console = _console()
    source = _source(model_specs, project_file, manifest_path)
    if source.manifest is None:
        raise click.UsageError(
            'your models need a manifest file: pass --manifest FILE or set manifest = "..." '
            "in [tool.tent]"
        )
    manifest_path = source.manifest
    catalogue = source.targets
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
        # The target's own run: a project model's symmetry and deadlock settings apply.
        result = target.run(RunOptions(workers=workers, progress=console.is_terminal)).result
        assert result is not None  # a model target always carries its check result
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
    "--docs",
    "docs",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="The docs folder whose diagrams/ to generate (default: the project root's docs/, "
    "found from the installed package or above the working folder).",
)
def spec_diagram(*, check_only: bool, docs: Path | None) -> None:
    """Generate the state diagrams (MyST pages, Graphviz DOT, SVG) from the spec's tables.

    Also renders every other ``docs/**/*.dot`` whose SVG does not show it. Rendering needs
    Graphviz's ``dot``; ``--check`` does not.
    """
    console = _console()
    if docs is None:
        try:
            docs = diagrams.project_root() / "docs"
        except FileNotFoundError as exc:
            raise click.UsageError(str(exc)) from exc
    directory = docs / "diagrams"
    others = [p for p in rendering.stale_renderings(docs) if p.parent != directory]
    if check_only:
        stale = [*diagrams.stale(directory), *(str(p.relative_to(docs)) for p in others)]
        if stale:
            console.print(
                Text(
                    f"stale diagram page(s) in {directory}: {', '.join(stale)}; "
                    f"regenerate with `tent spec diagram --docs {docs}`",
                    style="red",
                )
            )
            sys.exit(1)
        console.print(f"{directory}: {len(diagrams.pages())} page(s) up to date")
        return
    try:
        changed = diagrams.write(directory)
        for svg in others:
            source = svg.with_suffix(".dot").read_text(encoding="utf-8")
            svg.write_text(rendering.render_svg(source), encoding="utf-8")
            changed += (str(svg.relative_to(docs)),)
    except OSError as exc:
        raise click.ClickException(f"cannot write {directory}: {exc.strerror}") from exc
    except (rendering.GraphvizMissing, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from exc
    if changed:
        console.print(f"{directory}: updated {', '.join(changed)}")
    else:
        console.print(f"{directory}: {len(diagrams.pages())} page(s) up to date")


def _register_trace_commands() -> None:
    # `tent trace validate FILE...` lives beside the trace format it reads, `tent spec charts`
    # beside the charts it draws.
    from tent_models.trace import trace_cli  # noqa: PLC0415 - keeps `tent --help` light

    main.add_command(trace_cli)
    spec_group.add_command(report_command.spec_charts)


_register_trace_commands()
