"""The CI smoke run of ``tent bench incast``: 4 sender processes, one repetition of each mode,
small blocks, through the real engine over loopback TCP (and over the soft verbs device, and
across two network namespaces joined by a veth pair); its JSONL must pass the verifier."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tent_transport.cli import bench
from tent_transport.incast import _netns, _runner

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


# ------------------------------------------------------------------------------ netns


def _need_netns() -> None:
    # the one allowed skip (as tests/transport/net/test_netns.py): no ip netns on this machine
    try:
        _netns.check_available()
    except _netns.NetnsUnavailable as exc:
        pytest.skip(str(exc))


def _watch_netns(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[list[_netns.NetnsPair], list[dict[str, Any]]]:
    """Record the namespace pairs the runner makes and the senders' reports."""
    pairs: list[_netns.NetnsPair] = []
    reports: list[dict[str, Any]] = []
    make, expect = _netns.netns_pair, _runner._expect

    @contextlib.contextmanager
    def recording() -> Iterator[_netns.NetnsPair]:
        with make() as pair:
            pairs.append(pair)
            yield pair

    def spying(message: Any, kind: str) -> Any:
        out = expect(message, kind)
        if kind == "done":
            reports.append(out[1])
        return out

    monkeypatch.setattr(_runner, "netns_pair", recording)
    monkeypatch.setattr(_runner, "_expect", spying)
    return pairs, reports


def test_a_netns_smoke_crosses_the_veth_passes_the_verifier_and_leaves_no_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The smoke with the receiver in one network namespace and the senders in another: every
    sender's control connection runs from its namespace's address to the receiver's, one
    namespace pair serves the three runs, and it is gone afterwards."""
    _need_netns()
    pairs, reports = _watch_netns(monkeypatch)
    out = tmp_path / "netns.jsonl"
    runner = CliRunner()
    result = runner.invoke(bench, ["incast", "--smoke", "--network", "netns", "--out", str(out)])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["mode"] for r in records) == ["credit", "disabled", "fixed"]
    for record in records:
        assert record["row"] == "4-sender smoke netns"
        assert (record["config"]["network"], record["config"]["device"]) == ("netns", "tcp")
        assert record["completed"] == record["offered"] == 4 * record["config"]["blocks_per_sender"]
    verified = runner.invoke(bench, ["verify", str(out)])
    assert verified.exit_code == 0, verified.output
    assert len(pairs) == 1  # one pair for the whole matrix
    pair = pairs[0]
    assert pair.rx_address != pair.tx_address
    assert len(reports) == 3 * 4
    assert {(r["control_sockname"], r["control_peername"]) for r in reports} == {
        (pair.tx_address, pair.rx_address)
    }
    left = _netns.list_namespaces()
    assert pair.rx not in left and pair.tx not in left
    report = runner.invoke(bench, ["report", str(out), "--out", str(tmp_path / "report")])
    assert report.exit_code == 0, report.output
    assert (tmp_path / "report" / "table.md").read_text().count("4-sender smoke netns") >= 3


def test_a_restarted_receiver_enters_its_namespace_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Receiver restart over netns: the new receiver process serves the senders from the same
    namespace address, and the run still balances (completed + fenced == offered)."""
    _need_netns()
    pairs, reports = _watch_netns(monkeypatch)
    out = tmp_path / "restart.jsonl"
    args = ["incast", "--senders", "4", "--condition", "restart", "--mode", "credit"]
    args += ["--network", "netns", "--blocks", "24", "--block-mib", "1", "-r", "1"]
    runner = CliRunner()
    result = runner.invoke(bench, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["row"] == "4-sender restart netns"
    assert record["receiver_restarts"] == 1
    assert record["completed"] + record["failed_fenced"] == record["offered"]
    # work landed after the restart: more than the third the old receiver took before its kill
    assert record["completed"] > record["offered"] // 3
    verified = runner.invoke(bench, ["verify", str(out)])
    assert verified.exit_code == 0, verified.output
    (pair,) = pairs
    # every sender reconnected, to the restarted receiver at the rx namespace's address
    assert all(r["reconnects"] >= 1 for r in reports)
    assert {r["control_peername"] for r in reports} == {pair.rx_address}
    assert not {pair.rx, pair.tx} & set(_netns.list_namespaces())
