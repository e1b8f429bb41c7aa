"""Matplotlib figures of simulator runs (issue 14), written as SVG without timestamps.

Imported only when plots are drawn: matplotlib is the ``transport`` extra, not a core
dependency. The SVGs are deterministic for the same runs and matplotlib version
(``svg.hashsalt`` fixed, no date metadata).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._report import Summary
from ._run import SimResult

__all__ = ["plot_all", "plot_classes", "plot_meters", "plot_theta", "theta_series"]


def _pyplot() -> Any:
    import matplotlib  # noqa: PLC0415 (optional dependency, imported when drawing)

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "tent-sim"
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def _save(fig: object, path: Path) -> Path:
    # No RDF block: its namespace URLs would be external links in the offline docs.
    fig.savefig(  # type: ignore[attr-defined]
        path,
        format="svg",
        metadata={"Date": None, "Creator": None, "Format": None, "Type": None},
    )
    return path


def plot_all(summaries: Sequence[Summary], results: Sequence[SimResult], out: Path) -> list[Path]:
    """Draw the four figures into ``out``; return the files written.

    1. ``on_time_vs_theta.svg``: on-time rate of dispatched and of all requests, per θ.
    2. ``drops_vs_theta.svg``: dropped requests per θ.
    3. ``class_throughput.svg``: per-class throughput with and without arbitration (at the
       first θ).
    4. ``meters.svg``: the transmit estimate and the selection EWMA of every rail over time,
       beside the true link rate (first run of each arbitration setting).
    """
    out.mkdir(parents=True, exist_ok=True)
    return [
        *plot_theta(summaries, out),
        plot_classes(summaries, out),
        plot_meters(results, out),
    ]


_FLOOR_LABEL = "θ = 1, the floor (below it the drop cancels requests predicted to make it)"
_MODE_STYLE = {False: ("C0", "o", "full"), True: ("C3", "D", "none")}  # off filled, on hollow


def theta_series(
    summaries: Sequence[Summary], value: Callable[[Summary], float]
) -> list[tuple[str, list[float], list[float], bool | None]]:
    """``(label, θs, values, arbitration)`` per arbitration setting, sorted by θ; settings whose
    values are equal at every θ become one series labelled ``arbitration off = on`` (and
    ``None``), since two identical lines would hide one another."""
    series: dict[bool, tuple[list[float], list[float]]] = {}
    for arbitration in sorted({s.arbitration for s in summaries}):
        rows = sorted((s for s in summaries if s.arbitration == arbitration), key=lambda s: s.theta)
        series[arbitration] = ([s.theta for s in rows], [value(s) for s in rows])
    if len(series) == 2 and series[False] == series[True]:
        return [("arbitration off = on", *series[False], None)]
    return [
        (f"arbitration {'on' if arb else 'off'}", thetas, values, arb)
        for arb, (thetas, values) in series.items()
    ]


def _theta_axes(ax: Any, ylabel: str) -> None:
    ax.axvline(1.0, color="grey", lw=0.8, ls="--", label=_FLOOR_LABEL)
    ax.set_xlabel("θ_local (0 = drop off)")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="x-small")


def _style(arbitration: bool | None) -> dict[str, Any]:
    color, marker, fill = _MODE_STYLE[bool(arbitration)]
    return {"color": color, "marker": marker, "fillstyle": fill}


def plot_theta(summaries: Sequence[Summary], out: Path) -> list[Path]:
    """``on_time_vs_theta.svg`` and ``drops_vs_theta.svg``.

    Arbitration off is drawn filled, on hollow in another colour; settings with identical
    values are one line saying so (:func:`theta_series`). The dashed vertical line is θ = 1,
    named in the legend.
    """
    plt = _pyplot()
    written: list[Path] = []
    workload = summaries[0].workload if summaries else ""

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    rates: tuple[tuple[str, Callable[[Summary], float], str], ...] = (
        ("dispatched", lambda s: s.on_time_of_dispatched, "-"),
        ("all requests", lambda s: s.on_time_of_all, "--"),
    )
    for name, rate, line in rates:
        for label, thetas, values, arb in theta_series(summaries, rate):
            ax.plot(thetas, values, ls=line, label=f"{name}, {label}", **_style(arb))
    ax.set_ylim(0, 1.05)
    ax.set_title(f"on-time rate vs θ ({workload})")
    _theta_axes(ax, "on-time rate")
    written.append(_save(fig, out / "on_time_vs_theta.svg"))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for label, thetas, values, arb in theta_series(summaries, lambda s: float(s.dropped)):
        ax.plot(thetas, values, ls="-", label=label, **_style(arb))
    ax.set_title(f"dropped requests vs θ ({workload})")
    _theta_axes(ax, "dropped requests")
    written.append(_save(fig, out / "drops_vs_theta.svg"))
    plt.close(fig)
    return written


def plot_classes(summaries: Sequence[Summary], out: Path) -> Path:
    """``class_throughput.svg``: per-class throughput per arbitration setting, first θ."""
    plt = _pyplot()

    first_theta = min((s.theta for s in summaries), default=0.0)
    at_first = [s for s in summaries if s.theta == first_theta]
    classes = sorted({c for s in at_first for c in s.class_throughput_gbps})
    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.8 / max(len(at_first), 1)
    for index, summary in enumerate(sorted(at_first, key=lambda s: s.arbitration)):
        xs = [c + index * width for c in range(len(classes))]
        ax.bar(
            xs,
            [summary.class_throughput_gbps.get(c, 0.0) for c in classes],
            width,
            label="arbitration on" if summary.arbitration else "arbitration off",
        )
    ax.set_xticks([c + width * (len(at_first) - 1) / 2 for c in range(len(classes))], classes)
    ax.set_ylabel("throughput (GB/s)")
    ax.set_title(f"per-class throughput, θ = {first_theta:g}")
    ax.legend(fontsize="small")
    path = _save(fig, out / "class_throughput.svg")
    plt.close(fig)
    return path


def plot_meters(results: Sequence[SimResult], out: Path) -> Path:
    """``meters.svg``: both series of every rail over time (first run per arbitration)."""
    plt = _pyplot()

    fig, ax = plt.subplots(figsize=(7, 4))
    seen: set[bool] = set()
    link_labelled = False
    for result in results:
        if result.arbitration in seen:
            continue
        seen.add(result.arbitration)
        suffix = " (arb on)" if result.arbitration else " (arb off)"
        for rail in sorted({s.rail for s in result.rail_samples}):
            samples = [s for s in result.rail_samples if s.rail == rail]
            ts = [s.t_ns / 1e6 for s in samples]
            ax.plot(ts, [s.transmit_bps / 1e9 for s in samples], label=f"{rail} transmit{suffix}")
            ax.plot(
                ts, [s.selection_bps / 1e9 for s in samples], ":", label=f"{rail} selection{suffix}"
            )
            # On top and dashed: where an estimate is exact, the two still show.
            ax.plot(
                ts,
                [s.true_bps / 1e9 for s in samples],
                color="black",
                lw=1.0,
                ls="--",
                zorder=3,
                label=None if link_labelled else "link rate",
            )
            link_labelled = True
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("GB/s")
    ax.set_title("transmit estimate and selection EWMA against the link rate")
    ax.legend(fontsize="x-small")
    path = _save(fig, out / "meters.svg")
    plt.close(fig)
    return path
