"""`tent sim deadline` and `tent sim docs`: the table, the files, the lazy attachment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tent_models.cli import main
from tent_transport.sim import _docs

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_tent_models_does_not_import_the_transport() -> None:
    code = "import sys, tent_models.cli; print('tent_transport' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_sim_deadline_writes_the_table_json_and_plots(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "sim",
            "deadline",
            "--workload",
            "seed-requests",
            "--theta",
            "0,0.9,1.2",
            "--arbitration",
            "off",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    assert [(r["theta"], r["dropped"]) for r in rows] == [(0.0, 0), (0.9, 1), (1.2, 1)]
    assert (tmp_path / "table.md").read_text(encoding="utf-8").count("\n") == 2 + 3
    for name in ("on_time_vs_theta", "drops_vs_theta", "class_throughput", "meters"):
        assert (tmp_path / f"{name}.svg").read_text(encoding="utf-8").startswith("<?xml")


def test_sim_deadline_reads_a_workload_file(tmp_path: Path) -> None:
    workload = {
        "name": "mine",
        "nics": [{"name": "nic0", "bytes_per_ns": 8.0}],
        "config": {"enable_runtime_queue": True, "runtime_queue": {"deadline_aware": True}},
        "flows": [
            {
                "name": "f",
                "arrival": "periodic",
                "interval_ns": 1000000,
                "requests": 5,
                "size_bytes": [1048576, 2097152],
                "window_ns": 1000000,
            }
        ],
        "horizon_ns": 10000000,
    }
    path = tmp_path / "w.json"
    path.write_text(json.dumps(workload), encoding="utf-8")
    result = CliRunner().invoke(
        main, ["sim", "deadline", "--workload", str(path), "--theta", "0", "--arbitration", "on"]
    )
    assert result.exit_code == 0, result.output
    assert "mine" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workload", "no-such-thing"], "neither a workload file nor a name"),
        (["--workload", "single-flow", "--theta", "x"], "comma-separated"),
        (["--workload", "single-flow", "--arbitration", "maybe"], "on, off"),
        (["--workload", "single-flow", "--theta", "nan"], "finite numbers >= 0"),
        (["--workload", "single-flow", "--theta", "1,1e400"], "finite numbers >= 0"),
        (["--workload", "single-flow", "--theta", "-1"], "finite numbers >= 0"),
        ([], "--workload FILE|NAME is required"),
    ],
)
def test_sim_deadline_refuses_bad_input(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["sim", "deadline", *args])
    assert result.exit_code == 2 and message in result.output


def test_sim_deadline_lists_the_named_workloads() -> None:
    result = CliRunner().invoke(main, ["sim", "deadline", "--list"])
    assert result.exit_code == 0 and "arbitration-2792" in result.output


@pytest.mark.slow
def test_the_choosing_theta_page_is_up_to_date() -> None:
    assert _docs.stale(DOCS) == (), "stale: run `tent sim docs`"


def test_the_example_workload_file_loads() -> None:
    from tent_transport.sim import load_workload

    workload = load_workload(DOCS.parent / "examples" / "sim_workload.json")
    assert [f.name for f in workload.flows] == ["urgent", "bulk"]


def _summary(theta: float, arbitration: bool, dropped: int) -> Any:
    from tent_transport.sim._report import Summary

    return Summary(
        workload="w",
        theta=theta,
        arbitration=arbitration,
        offered=10,
        dispatched=10 - dropped,
        dropped=dropped,
        never_ended=0,
        on_time_of_dispatched=1.0,
        on_time_of_all=0.5,
        goodput_gbps=1.0,
        throughput_gbps=1.0,
        class_throughput_gbps={},
        class_on_time={},
        mlu_histogram=(),
        dispatched_per_pick=1.0,
        mean_dispatching_bytes=0.0,
        mean_rail_bytes=0.0,
    )


def test_identical_arbitration_series_are_one_line_that_says_so() -> None:
    """Two equal lines would hide one another: the θ plots draw them once, labelled so."""
    from tent_transport.sim._plots import theta_series

    same = [_summary(t, arb, 3) for t in (0.0, 1.0) for arb in (False, True)]
    assert theta_series(same, lambda s: float(s.dropped)) == [
        ("arbitration off = on", [0.0, 1.0], [3.0, 3.0], None)
    ]
    different = [*same[:3], _summary(1.0, True, 5)]
    labels = [label for label, *_ in theta_series(different, lambda s: float(s.dropped))]
    assert labels == ["arbitration off", "arbitration on"]
