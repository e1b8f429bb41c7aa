"""Matplotlib figures of simulator runs (issue 14), written as SVG without timestamps.

Imported only when plots are drawn: matplotlib is the ``transport`` extra, not a core
dependency. The SVGs are deterministic for the same runs and matplotlib version
(``svg.hashsalt`` fixed, no date metadata).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._report import Summary
from ._run import SimResult

__all__ = ["plot_all", "plot_classes", "plot_meters", "plot_theta"]


def _pyplot() -> Any:
    import matplotlib  # noqa: PLC0415 (optional dependency, imported when drawing)

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "tent-sim"
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def _save(fig: object, path: Path) -> Path:
    fig.savefig(path, format="svg", metadata={"Date": None})  # type: ignore[attr-defined]
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


def plot_theta(summaries: Sequence[Summary], out: Path) -> list[Path]:
    """``on_time_vs_theta.svg`` and ``drops_vs_theta.svg``."""
    plt = _pyplot()
    written: list[Path] = []
    modes = sorted({s.arbitration for s in summaries})

    fig, ax = plt.subplots(figsize=(6, 4))
    for arbitration in modes:
        rows = sorted((s for s in summaries if s.arbitration == arbitration), key=lambda s: s.theta)
        label = "arbitration on" if arbitration else "arbitration off"
        thetas = [s.theta for s in rows]
        ax.plot(thetas, [s.on_time_of_dispatched for s in rows], "o-", label=f"dispatched, {label}")
        ax.plot(thetas, [s.on_time_of_all for s in rows], "s--", label=f"all, {label}")
    ax.axvline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("θ_local (0 = drop off)")
    ax.set_ylabel("on-time rate")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize="small")
    ax.set_title(summaries[0].workload if summaries else "")
    written.append(_save(fig, out / "on_time_vs_theta.svg"))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for arbitration in modes:
        rows = sorted((s for s in summaries if s.arbitration == arbitration), key=lambda s: s.theta)
        ax.plot(
            [s.theta for s in rows],
            [s.dropped for s in rows],
            "o-",
            label="arbitration on" if arbitration else "arbitration off",
        )
    ax.axvline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("θ_local (0 = drop off)")
    ax.set_ylabel("dropped requests")
    ax.legend(fontsize="small")
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
            ax.plot(ts, [s.true_bps / 1e9 for s in samples], color="grey", lw=0.6)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("GB/s")
    ax.set_title("transmit estimate vs selection EWMA (grey: link rate)")
    ax.legend(fontsize="x-small")
    path = _save(fig, out / "meters.svg")
    plt.close(fig)
    return path
