"""The checker's speedup curves (docs/checker_scale.md) from measured runs; writes one SVG.

Usage::

    python benchmarks/plot_checker_scale.py [DATA.json ...] [--out docs/checker_scale/speedup.svg]

Each ``DATA.json`` is a report of ``benchmarks/checker_workers.py --json`` (its runs give, per
model and worker count, the median seconds; the speedup is over the best serial run) or a
transcribed table (``{"label": ..., "models": {name: {"seconds": {"1": s, "4": s}}}}``). Every
file's ``label`` (or its name) and ``ceiling`` (N independent serial runs at once, when
measured) appear in the legend. Without arguments it reads every ``docs/checker_scale/*.json``.
The SVG records the SHA-256 of its inputs (``tests/docs/test_checker_scale_plot.py`` checks
that the checked-in plot was drawn from the checked-in data).
"""

from __future__ import annotations

import hashlib
import json
import statistics
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "checker_scale"
MARK = "tent-data-sha256:"


def curves(report: dict[str, Any]) -> dict[str, dict[int, float]]:
    """Per model, worker count -> speedup over one process (the best serial run)."""
    out: dict[str, dict[int, float]] = {}
    for name, model in report["models"].items():
        if "seconds" in model:  # a transcribed table
            seconds = {int(count): float(s) for count, s in model["seconds"].items()}
        else:
            by_count: dict[int, list[float]] = {}
            for run in model["runs"]:
                if "seconds" in run and not run.get("baseline"):
                    by_count.setdefault(run["workers"], []).append(run["seconds"])
            seconds = {
                count: (min(values) if count == 1 else statistics.median(values))
                for count, values in by_count.items()
            }
        if 1 in seconds:
            out[name] = {count: seconds[1] / s for count, s in sorted(seconds.items())}
    return out


def digest(paths: list[Path]) -> str:
    """SHA-256 over the inputs' names and bytes, in the order given."""
    sha = hashlib.sha256()
    for path in paths:
        sha.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return sha.hexdigest()


def recorded_digest(svg: Path) -> str | None:
    """The input digest a plot written by :func:`draw` records, or None."""
    text = svg.read_text(encoding="utf-8")
    at = text.find(MARK)
    if at < 0:
        return None
    tail = text[at + len(MARK) :]
    return tail[: len(tail) - len(tail.lstrip("0123456789abcdef"))]


def draw(paths: list[Path], out: Path) -> None:
    """Plot every input's curves (speedup against workers, with the ideal line) into ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "tent"  # stable element ids: the file changes with the data
    figure, axes = plt.subplots(figsize=(7, 4.5))
    top = 2
    styles = ["-", "--", ":", "-."]
    for number, path in enumerate(paths):
        report = json.loads(path.read_text(encoding="utf-8"))
        label = report.get("label", path.stem)
        ceiling = report.get("ceiling", {}).get("ceiling")
        for name, curve in curves(report).items():
            counts = sorted(curve)
            top = max(top, *counts)
            axes.plot(
                counts,
                [curve[c] for c in counts],
                styles[number % len(styles)],
                marker="o",
                label=f"{name}, {label}",
            )
        if ceiling:
            processes = report["ceiling"]["processes"]
            axes.plot([processes], [ceiling], marker="*", markersize=12, linestyle="none",
                      label=f"{processes} independent serial runs, {label}")
    axes.plot([1, top], [1, top], color="grey", linewidth=0.8, label="linear")
    axes.set_xlabel("worker processes")
    axes.set_ylabel("speedup over one process")
    axes.set_xlim(left=0)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7)
    figure.tight_layout()
    # No RDF block (its namespace URLs would be external links in the offline docs): the
    # inputs' digest goes into a comment after the XML declaration.
    figure.savefig(
        out, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None}
    )
    plt.close(figure)
    head, newline, body = out.read_text(encoding="utf-8").partition("\n")
    out.write_text(f"{head}{newline}<!-- {MARK}{digest(paths)} -->\n{body}", encoding="utf-8")


@click.command(
    help=(__doc__ or "").replace("\n\n", "\n\n\b\n"),
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.argument("inputs", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DATA / "speedup.svg",
    show_default=True,
)
def main(inputs: tuple[Path, ...], out: Path) -> None:
    paths = list(inputs) or sorted(DATA.glob("*.json"))
    if not paths:
        raise click.UsageError(f"no data: pass checker_workers.py reports or add them to {DATA}")
    draw(paths, out)
    click.echo(json.dumps({"out": str(out), "inputs": [str(p) for p in paths]}))


if __name__ == "__main__":
    main()
