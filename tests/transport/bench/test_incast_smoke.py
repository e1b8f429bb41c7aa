"""The CI smoke run of ``tent bench incast``: 4 sender processes, one repetition of each mode,
small blocks, through the real engine over loopback TCP; its JSONL must pass the verifier."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from tent_transport.cli import bench

pytestmark = [pytest.mark.transport, pytest.mark.slow]


def test_smoke_matrix_passes_the_verifier(tmp_path: Path) -> None:
    out = tmp_path / "smoke.jsonl"
    runner = CliRunner()
    result = runner.invoke(bench, ["incast", "--smoke", "--out", str(out)])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["mode"] for r in records) == ["credit", "disabled", "fixed"]
    for record in records:
        assert record["config"]["senders"] == 4
        assert record["completed"] == record["offered"] == 4 * record["config"]["blocks_per_sender"]
    verified = runner.invoke(bench, ["verify", str(out)])
    assert verified.exit_code == 0, verified.output
    report = runner.invoke(bench, ["report", str(out), "--out", str(tmp_path / "report")])
    assert report.exit_code == 0, report.output
    assert (tmp_path / "report" / "table.md").read_text().count("4-sender smoke") >= 3
