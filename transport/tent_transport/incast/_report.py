"""The incast report: medians over repetitions beside the RFC's published numbers, and plots.

``write_report(records, folder)`` writes ``table.md`` (the medians and the criterion 6 / 7
comparison), ``summary.json`` (the same numbers) and three PNG plots (matplotlib, Agg):
occupancy over time fixed vs credit, throughput and worst-sender P99 per mode, and stall time
per lease batch.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ._config import DEVICES, NETWORKS

__all__ = ["RFC_FIGURES", "comparison", "medians", "write_report"]

# docs/transport_design.md#incast-matrix (H20 cluster, 4 MiB, 8-slot cap; 64 for the slowdown):
# (fixed peak, fixed violations, credit peak, credit violations); healthy 16-sender throughput
# credit vs fixed +0.41%; lease batch 1 cost 7.75%, batch 2 none.
RFC_FIGURES: dict[str, tuple[int, int, int, int]] = {
    "4-sender": (11, 657, 8, 0),
    "16-sender": (22, 14657, 8, 0),
    "16-sender slowdown": (81, 14103, 64, 0),
}
RFC_THROUGHPUT_DELTA = {
    "16-sender": "+0.41%",
    "16-sender slowdown": "+9.59%",
    "4-sender": "-0.51%",
    "1-sender": "+1.53%",
}

_FIELDS = (
    "throughput_mib_s",
    "worst_sender_p99_us",
    "mean_sender_p99_us",
    "jain_fairness",
    "capacity_violations",
    "credit_stalls",
    "stall_time_ms",
    "control_messages_per_transfer",
)


def _valid(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if "error" not in r]


def medians(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], dict[str, float]]:
    """Per (row, mode): the median of every numeric field over its repetitions."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in _valid(records):
        groups[(r["row"], r["mode"])].append(r)
    out = {}
    for key, runs in groups.items():
        m = {f: float(statistics.median(float(r[f]) for r in runs)) for f in _FIELDS}
        m["peak_slots"] = float(
            statistics.median(r["peak_occupancy"].get("request_slots", 0) for r in runs)
        )
        m["max_peak_slots"] = float(max(r["peak_occupancy"].get("request_slots", 0) for r in runs))
        m["capacity"] = float(runs[0]["capacity"]["request_slots"])
        m["window"] = float(runs[0]["config"]["window"])
        m["lease_batch"] = float(runs[0]["config"]["lease_batch"])
        m["runs"] = float(len(runs))
        out[key] = m
    return out


def _rfc_row(row: str) -> str:
    """The RFC row a row stands for: ``<row> <device>`` off tcp and ``<row> netns`` are the
    same experiment."""
    for place in (*DEVICES[1:], *NETWORKS[1:]):
        if row.endswith(f" {place}"):
            return row[: -len(place) - 1]
    return row


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def comparison(med: Mapping[tuple[str, str], Mapping[str, float]]) -> list[dict[str, Any]]:
    """Criterion 6 / 7 per row that has both fixed and credit runs."""
    rows = []
    for row in sorted({r for r, _ in med}):
        fixed, credit = med.get((row, "fixed")), med.get((row, "credit"))
        if fixed is None or credit is None:
            continue
        rfc = RFC_FIGURES.get(_rfc_row(row))
        rows.append(
            {
                "row": row,
                "capacity": int(credit["capacity"]),
                "fixed_window": int(fixed["window"]),
                "fixed_peak": fixed["max_peak_slots"],
                "fixed_violations": fixed["capacity_violations"],
                "credit_peak": credit["max_peak_slots"],
                "credit_violations": credit["capacity_violations"],
                "rfc": None if rfc is None else f"{rfc[0]} / {rfc[1]} vs {rfc[2]} / {rfc[3]}",
                "throughput_ratio": _ratio(credit["throughput_mib_s"], fixed["throughput_mib_s"]),
                "rfc_throughput_delta": RFC_THROUGHPUT_DELTA.get(_rfc_row(row)),
                "worst_p99_ratio": _ratio(
                    credit["worst_sender_p99_us"], fixed["worst_sender_p99_us"]
                ),
                "fairness_fixed": fixed["jain_fairness"],
                "fairness_credit": credit["jain_fairness"],
            }
        )
    return rows


def _fmt(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _markdown(
    med: Mapping[tuple[str, str], Mapping[str, float]],
    comp: list[dict[str, Any]],
    machine: Mapping[str, Any],
) -> str:
    parts = [
        "### Criterion 6 and 7: fixed window against receiver credit (medians)",
        "",
        _table(
            [
                "row",
                "cap",
                "fixed window",
                "fixed peak / violations",
                "credit peak / violations",
                "RFC (fixed vs credit)",
                "throughput credit / fixed",
                "RFC Δ",
                "worst P99 credit / fixed",
                "Jain fixed",
                "Jain credit",
            ],
            [
                [
                    c["row"],
                    c["capacity"],
                    c["fixed_window"],
                    f"{c['fixed_peak']:.0f} / {c['fixed_violations']:.0f}",
                    f"{c['credit_peak']:.0f} / {c['credit_violations']:.0f}",
                    c["rfc"],
                    c["throughput_ratio"],
                    c["rfc_throughput_delta"],
                    c["worst_p99_ratio"],
                    round(c["fairness_fixed"], 4),
                    round(c["fairness_credit"], 4),
                ]
                for c in comp
            ],
        ),
        "",
        "### Every row and mode (medians over repetitions)",
        "",
        _table(
            [
                "row",
                "mode",
                "runs",
                "MiB/s",
                "worst P99 ms",
                "mean P99 ms",
                "Jain",
                "peak slots (max)",
                "violations",
                "stalls",
                "stall ms",
                "ctl msgs / transfer",
            ],
            [
                [
                    row,
                    mode,
                    int(m["runs"]),
                    m["throughput_mib_s"],
                    m["worst_sender_p99_us"] / 1000,
                    m["mean_sender_p99_us"] / 1000,
                    round(m["jain_fairness"], 4),
                    m["max_peak_slots"],
                    m["capacity_violations"],
                    m["credit_stalls"],
                    m["stall_time_ms"],
                    m["control_messages_per_transfer"],
                ]
                for (row, mode), m in sorted(med.items())
            ],
        ),
        "",
        f"Machine: {machine.get('cpus', '?')} CPUs, Python {machine.get('python', '?')}, "
        f"1-minute load {machine.get('load_1m', 0):.1f} at the first run.",
        "",
    ]
    return "\n".join(parts)


def _plots(
    records: Sequence[Mapping[str, Any]],
    med: Mapping[tuple[str, str], Mapping[str, float]],
    out: Path,
) -> list[Path]:
    import matplotlib  # noqa: PLC0415 (matplotlib only when drawing)

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "tent-incast"
    import matplotlib.pyplot as plt  # noqa: PLC0415

    def save(fig: Any, name: str) -> Path:
        # SVG, no date and no RDF block (its namespace URLs would be external links in the docs)
        path = out / name
        fig.savefig(
            path,
            format="svg",
            bbox_inches="tight",  # keeps a legend placed below the axes
            metadata={"Date": None, "Creator": None, "Format": None, "Type": None},
        )
        plt.close(fig)
        return path

    paths = []
    valid = _valid(records)
    # 1. occupancy over time, every mode, on the row with the most senders (first rep)
    candidates = [
        r
        for r in valid
        if r["mode"] in MODES
        and r["config"]["condition"] == "normal"
        and not r["row"].endswith("tune")
    ]
    if candidates:
        top = max(r["config"]["senders"] for r in candidates)
        fig, ax = plt.subplots(figsize=(7, 3.5))
        cap = 0
        for mode in MODES:
            run = next(
                (
                    r
                    for r in candidates
                    if r["mode"] == mode
                    and r["config"]["senders"] == top
                    and "batch" not in r["row"]
                ),
                None,
            )
            if run is None:
                continue
            cap = run["capacity"]["request_slots"]
            series = run["occupancy_series"]
            start = series[0][0] if series else 0  # the modes ran one after the other
            ax.step(
                [p[0] - start for p in series],
                [p[1] for p in series],
                where="post",
                label=f"{mode} (peak {run['peak_occupancy']['request_slots']})",
            )
        ax.axhline(cap, color="black", linestyle="--", linewidth=1, label=f"capacity {cap}")
        ax.set_xlabel("time since the mode's first write (ms); the modes ran one after another")
        ax.set_ylabel("receiver request slots in use")
        ax.set_title(f"{top}-sender incast: receiver occupancy")
        ax.legend(fontsize="small")
        fig.tight_layout()
        paths.append(save(fig, "occupancy.svg"))
    # 2. throughput and worst-sender P99 per mode, per row
    rows = sorted(
        {
            row
            for row, mode in med
            if mode in ("disabled", "fixed", "credit")
            and "batch" not in row
            and not row.endswith("tune")
        }
    )
    if rows:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
        modes = MODES
        width = 0.8 / len(modes)
        for i, mode in enumerate(modes):
            xs = [j + i * width for j in range(len(rows))]
            a1.bar(
                xs,
                [med.get((r, mode), {}).get("throughput_mib_s", 0) for r in rows],
                width,
                label=mode,
            )
            a2.bar(
                xs,
                [med.get((r, mode), {}).get("worst_sender_p99_us", 0) / 1000 for r in rows],
                width,
                label=mode,
            )
        for ax, label in ((a1, "receiver throughput (MiB/s)"), (a2, "worst-sender P99 (ms)")):
            ax.set_xticks(
                [j + width for j in range(len(rows))], rows, rotation=30, ha="right", fontsize=8
            )
            ax.set_ylabel(label)
            for j, row in enumerate(rows):  # a row a mode did not run is not a zero
                for i, mode in enumerate(modes):
                    if (row, mode) not in med:
                        ax.text(
                            j + i * width,
                            0,
                            "n/a",
                            rotation=90,
                            ha="center",
                            va="bottom",
                            fontsize=6,
                            color="grey",
                        )
        a1.legend(fontsize="small")
        fig.tight_layout()
        paths.append(save(fig, "throughput_p99.svg"))
    # 3. stall time (and throughput) per lease batch, 16-sender healthy credit
    batches = sorted(
        (m["lease_batch"], m["stall_time_ms"], m["throughput_mib_s"], m["credit_stalls"])
        for (row, mode), m in med.items()
        if mode == "credit" and (row == "16-sender" or row.startswith("16-sender batch"))
    )
    if batches:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        labels = [str(int(b[0])) for b in batches]
        bars = ax.bar(
            labels,
            [b[1] for b in batches],
            color="tab:orange",
            label="credit stall time, summed over senders (left)",
        )
        ax.set_xlabel("lease batch (blocks per grant)")
        ax.set_ylabel("credit stall time per run (ms, median)")
        twin = ax.twinx()
        (line,) = twin.plot(
            labels, [b[2] for b in batches], "o-", color="tab:blue", label="throughput (right)"
        )
        twin.set_ylabel("throughput (MiB/s)")
        ax.legend(
            handles=[bars, line],
            fontsize="small",
            loc="upper center",
            bbox_to_anchor=(0.5, -0.22),
            ncol=2,
        )
        ax.set_title("16-sender healthy: lease batch")
        fig.tight_layout()
        paths.append(save(fig, "lease_batch.svg"))
    return paths


MODES = ("disabled", "fixed", "credit")
PLOTS = (
    ("occupancy.svg", "a normal-condition row of the modes"),
    ("throughput_p99.svg", "a disabled, fixed or credit row"),
    ("lease_batch.svg", "the 16-sender lease-batch sweep (credit mode)"),
)
"""The report's plots, each with what the records must hold for it to be drawn."""


def missing_plots(paths: Sequence[Path]) -> list[str]:
    """``name (needs …)`` for every plot of :data:`PLOTS` the records could not give."""
    drawn = {p.name for p in paths}
    return [f"{name} (needs {needs})" for name, needs in PLOTS if name not in drawn]


def write_report(records: Sequence[Mapping[str, Any]], out: Path) -> list[Path]:
    """Write ``table.md``, ``summary.json`` and the plots into ``out`` (created); returns the
    paths written. Raises ValueError when no record is usable."""
    if not _valid(records):
        raise ValueError("no usable incast record (every run failed or the file is empty)")
    out.mkdir(parents=True, exist_ok=True)
    med = medians(records)
    comp = comparison(med)
    machine = _valid(records)[0]["machine"]
    table = out / "table.md"
    table.write_text(_markdown(med, comp, machine))
    summary = out / "summary.json"
    summary.write_text(
        json.dumps(
            {
                "medians": [{"row": r, "mode": m, **v} for (r, m), v in sorted(med.items())],
                "comparison": comp,
                "machine": machine,
            },
            indent=1,
        )
    )
    return [table, summary, *_plots(records, med, out)]
