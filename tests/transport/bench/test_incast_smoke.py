"""The CI smoke run of ``tent bench incast``: 4 sender processes, one repetition of each mode,
small blocks, through the real engine over loopback TCP (and over the soft verbs device); its
JSONL must pass the verifier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tent_transport.cli import bench
from tent_transport.incast import _runner

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


def test_a_softverbs_smoke_passes_the_verifier_and_leaves_no_fabric(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same smoke over the soft verbs device: one-sided writes into the receiver's fabric
    memory, admitted at their notices; every run's private fabric is gone afterwards."""
    fabrics = tmp_path / "shm"
    fabrics.mkdir()
    made: list[str] = []

    def base() -> str:
        made.append(str(fabrics))
        return str(fabrics)

    monkeypatch.setattr(_runner, "_shm_base", base)
    # the receiver's soft devices are nodes of the run's fabric while it drains: evidence the
    # engines ran on soft verbs, not on TCP with a fabric nobody opened
    nodes: list[int] = []
    expect = _runner._expect

    def spying(message: Any, kind: str) -> Any:
        if kind == "drained":
            nodes.append(len(list(fabrics.glob("tent-incast-fabric-*/node-*"))))
        return expect(message, kind)

    monkeypatch.setattr(_runner, "_expect", spying)
    out = tmp_path / "softverbs.jsonl"
    runner = CliRunner()
    args = ["incast", "--smoke", "--device", "softverbs", "--out", str(out)]
    result = runner.invoke(bench, args)
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["mode"] for r in records) == ["credit", "disabled", "fixed"]
    for record in records:
        assert record["row"] == "4-sender smoke softverbs"
        assert record["config"]["device"] == "softverbs"
        assert record["completed"] == record["offered"] == 4 * record["config"]["blocks_per_sender"]
    verified = runner.invoke(bench, ["verify", str(out)])
    assert verified.exit_code == 0, verified.output
    assert len(made) == 3  # a fabric per run, under ``fabrics``
    assert nodes == [2, 2, 2]  # the receiver engine's sending and receiving HCA, each run
    assert list(fabrics.iterdir()) == []  # each run's fabric (and its nodes) removed
