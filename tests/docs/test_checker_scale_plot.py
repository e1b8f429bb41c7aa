"""docs/checker_scale.md's speedup plot is drawn from the checked-in measurements."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from plot_checker_scale import DATA, curves, digest, draw, recorded_digest  # noqa: E402


def test_the_checked_in_plot_was_drawn_from_the_checked_in_data() -> None:
    inputs = sorted(DATA.glob("*.json"))
    assert inputs, "docs/checker_scale/ holds the measured runs"
    assert recorded_digest(DATA / "speedup.svg") == digest(inputs), (
        "stale: run `python benchmarks/plot_checker_scale.py`"
    )


def test_speedups_come_from_the_best_serial_and_the_median_parallel_run() -> None:
    measured = {
        "models": {
            "m": {
                "runs": [
                    {"workers": 1, "seconds": 12.0},
                    {"workers": 1, "seconds": 10.0},
                    {"workers": 4, "seconds": 4.0},
                    {"workers": 4, "seconds": 2.0},
                    {"workers": 4, "seconds": 5.0},
                    {"workers": 4, "seconds": 1.0, "baseline": True},  # another tree's run
                    {"workers": 8, "timed_out": True},
                ]
            }
        }
    }
    assert curves(measured) == {"m": {1: 1.0, 4: 2.5}}
    table = {"models": {"t": {"seconds": {"1": 44.0, "16": 11.0}}}}
    assert curves(table) == {"t": {1: 1.0, 16: 4.0}}


def test_a_redrawn_plot_records_its_inputs(tmp_path: Path) -> None:
    inputs = sorted(DATA.glob("*.json"))
    out = tmp_path / "plot.svg"
    draw(inputs, out)
    assert recorded_digest(out) == digest(inputs)
    assert "speedup over one process" in out.read_text(encoding="utf-8")
