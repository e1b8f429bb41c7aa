"""The transport's command groups, attached lazily to the ``tent`` root command.

``tent_models.cli`` resolves ``tent sim`` to :data:`sim` only when it is invoked, so the model
checker never imports the I/O layer. ``tent sim deadline`` runs the deadline simulator (issue
14) over a grid of θ and arbitration settings and writes a table, JSON and plots.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import attrs
import click
from rich.console import Console
from rich.table import Table

from .bench import bench
from .errors import ConfigError
from .incast._cli import hops_command, incast_command, report_command, verify_command
from .sim import (
    SimResult,
    Summary,
    Workload,
    dropped_feasible,
    load_workload,
    named_workload,
    simulate,
    summarize,
    table_rows,
    workload_names,
)

__all__ = ["bench", "sim"]

for _command in (incast_command, verify_command, report_command, hops_command):
    bench.add_command(_command)  # issue 13: the incast matrix joins engine-tcp's bench group


@click.group("sim", context_settings={"help_option_names": ["-h", "--help"]})
def sim() -> None:
    """Simulate the engine's dispatch core in virtual time."""


def _floats(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"not a comma-separated list of numbers: {text!r}") from None
    if not values or any(not math.isfinite(v) or v < 0 for v in values):
        raise click.BadParameter("θ values are finite numbers >= 0 (0 = drop off)")
    return values


def _switches(text: str) -> list[bool]:
    table = {"on": True, "off": False}
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts or any(p not in table for p in parts):
        raise click.BadParameter("use on, off or on,off")
    return [table[p] for p in parts]


def resolve_workload(text: str, seed: int | None) -> Workload:
    """A named workload, or a JSON file; ``seed`` overrides its seed."""
    if text in workload_names():
        workload = named_workload(text)
    else:
        path = Path(text)
        if not path.is_file():
            raise click.BadParameter(
                f"{text!r} is neither a workload file nor a name ({', '.join(workload_names())})"
            )
        try:
            workload = load_workload(path)
        except ConfigError as exc:
            raise click.BadParameter(str(exc)) from None
    return workload if seed is None else attrs.evolve(workload, seed=seed)


def run_grid(
    workload: Workload, thetas: list[float], arbitrations: list[bool]
) -> tuple[list[Summary], list[SimResult], dict[tuple[float, bool], int]]:
    """Every (θ, arbitration) run, their summaries, and the feasible drops against θ = 0."""
    results: list[SimResult] = []
    feasible: dict[tuple[float, bool], int] = {}
    for arbitration in arbitrations:
        baseline = simulate(workload, theta=0.0, arbitration=arbitration)
        for theta in thetas:
            run = (
                baseline if theta == 0 else simulate(workload, theta=theta, arbitration=arbitration)
            )
            results.append(run)
            feasible[(theta, arbitration)] = dropped_feasible(run, baseline)
    return [summarize(r) for r in results], results, feasible


def _summary_json(summary: Summary, feasible: int) -> dict[str, Any]:
    data = attrs.asdict(summary)
    data["dropped_feasible"] = feasible
    data["mlu_histogram"] = [list(pair) for pair in summary.mlu_histogram]
    return data


def write_outputs(
    out: Path,
    summaries: list[Summary],
    results: list[SimResult],
    feasible: dict[tuple[float, bool], int],
    *,
    plots: bool = True,
) -> list[Path]:
    """``summary.json``, ``table.md`` and (with ``plots``) the four SVG figures."""
    out.mkdir(parents=True, exist_ok=True)
    payload = [_summary_json(s, feasible[(s.theta, s.arbitration)]) for s in summaries]
    written = [out / "summary.json", out / "table.md"]
    written[0].write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    rows = table_rows(summaries)
    header, *body = rows
    lines = ["| " + " | ".join(header) + " | feasible dropped |", "|" + "---|" * (len(header) + 1)]
    for summary, row in zip(summaries, body, strict=True):
        extra = feasible[(summary.theta, summary.arbitration)]
        lines.append("| " + " | ".join(row) + f" | {extra} |")
    written[1].write_text("\n".join(lines) + "\n", encoding="utf-8")
    if plots:
        from .sim._plots import plot_all  # noqa: PLC0415 (matplotlib only when drawing)

        written.extend(plot_all(summaries, results, out))
    return written


@sim.command("deadline")
@click.option(
    "--workload",
    "workload_text",
    default=None,
    help="A workload JSON file or a named workload (see --list).",
)
@click.option("--theta", "theta_text", default="0,1.0,1.2,1.5,2", show_default=True)
@click.option("--arbitration", "arbitration_text", default="on,off", show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--seed", type=click.IntRange(min=0), default=None, help="Override the seed.")
@click.option("--no-plots", is_flag=True, help="Write the table and JSON only.")
@click.option("--list", "list_only", is_flag=True, help="List the named workloads and exit.")
def deadline(
    *,
    workload_text: str | None,
    theta_text: str,
    arbitration_text: str,
    out_dir: Path | None,
    seed: int | None,
    no_plots: bool,
    list_only: bool,
) -> None:
    """Sweep θ_local and the arbitration over a workload, on the real scheduling code."""
    console = Console()
    if not console.is_terminal:  # a log, not a screen: do not fold the table
        console.width = max(console.width, 200)
    if list_only:
        for name in workload_names():
            console.print(f"{name}: {named_workload(name).description}")
        return
    if workload_text is None:
        raise click.UsageError("--workload FILE|NAME is required (see --list)")
    thetas = _floats(theta_text)
    arbitrations = _switches(arbitration_text)
    workload = resolve_workload(workload_text, seed)
    summaries, results, feasible = run_grid(workload, thetas, arbitrations)
    table = Table(title=f"tent sim deadline: {workload.name} (seed {workload.seed})")
    header, *body = table_rows(summaries)
    for column in [*header, "feasible dropped"]:
        table.add_column(column)
    for summary, row in zip(summaries, body, strict=True):
        table.add_row(*row, str(feasible[(summary.theta, summary.arbitration)]))
    console.print(table)
    if out_dir is not None:
        for path in write_outputs(out_dir, summaries, results, feasible, plots=not no_plots):
            console.print(f"wrote {path}")


@sim.command("docs")
@click.option(
    "--docs",
    "docs_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("docs"),
    show_default=True,
    help="The docs folder (the repository's docs/).",
)
@click.option("--check", is_flag=True, help="Fail (exit 1) if the checked-in page is stale.")
def docs_command(*, docs_dir: Path, check: bool) -> None:
    """Regenerate the "Choosing θ" page, its data and its plots from simulator runs."""
    from .sim import _docs  # noqa: PLC0415 (runs the simulator; only for this command)

    console = Console()
    if check:
        stale = _docs.stale(docs_dir)
        if stale:
            console.print(f"stale: {', '.join(stale)}; run `tent sim docs`")
            raise SystemExit(1)
        console.print("the Choosing θ page is up to date")
        return
    for path in _docs.write(docs_dir):
        console.print(f"wrote {path}")
