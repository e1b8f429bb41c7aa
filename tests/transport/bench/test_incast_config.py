"""What an incast run is: the paths (direct / staged / mixed), the devices (tcp / softverbs), the
networks (loopback / netns) and the default matrix's rows."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner
from tent_transport.cli import bench
from tent_transport.config import load_engine_config
from tent_transport.incast import (
    Mode,
    RunConfig,
    _netns,
    _runner,
    default_matrix,
    full_matrix,
    smoke_matrix,
    tune_candidates,
)
from tent_transport.incast._worker import engine_config, staged


def _spec(path: str, mode: str = "credit") -> dict[str, object]:
    config = RunConfig(row="r", mode=Mode(mode), senders=4, path=path, block=1 << 20)
    return config.as_dict()


@pytest.mark.parametrize("mode", [Mode.DISABLED, Mode.FIXED])
@pytest.mark.parametrize("path", ["staged", "mixed"])
def test_staging_needs_credit_mode(path: str, mode: Mode) -> None:
    with pytest.raises(ValueError, match="credit mode"):
        RunConfig(row="r", mode=mode, senders=4, path=path)


def test_an_unknown_path_is_refused() -> None:
    with pytest.raises(ValueError, match="path must be one of"):
        RunConfig(row="r", mode=Mode.CREDIT, senders=4, path="sideways")


def test_staged_receivers_lease_staging_slots_and_keep_a_reserve_for_the_inner_moves() -> None:
    spec = _spec("staged")
    credit = engine_config(spec, "receiver")["receiver_credit"]
    assert credit["grant"]["initial_grant"]["staging_slots"] == max(1, spec["lease_batch"])
    assert credit["staging_reserve"] == {
        "data_bytes": 1 << 20,
        "request_slots": 1,
        "consumer_slots": 1,
    }
    load_engine_config(engine_config(spec, "receiver"))  # a configuration the engine accepts
    direct = engine_config(_spec("direct"), "receiver")["receiver_credit"]
    assert "staging_reserve" not in direct
    assert "staging_slots" not in direct["grant"]["initial_grant"]


def test_which_blocks_are_staged() -> None:
    assert [staged(_spec("direct"), s) for s in range(4)] == [False] * 4
    assert [staged(_spec("staged"), s) for s in range(4)] == [True] * 4
    assert [staged(_spec("mixed"), s) for s in range(4)] == [False, True, False, True]


def test_the_default_matrix_has_the_rfc_rows_the_paths_and_the_lease_sweep() -> None:
    configs = default_matrix(repetitions=2)
    rows = {(c.row, c.mode) for c in configs}
    for row in ("1-sender", "4-sender", "16-sender", "16-sender slowdown", "4-sender restart"):
        assert {(row, m) for m in Mode} <= rows
    assert {("4-sender staged", Mode.CREDIT), ("4-sender mixed", Mode.CREDIT)} <= rows
    sweep = {c.lease_batch for c in configs if c.row.startswith("16-sender batch")}
    assert sweep == {1, 2, 4, 8}  # static lease batches beside the row's adaptive default
    assert {c.lease_batch for c in configs if c.row == "16-sender"} == {0}
    # no mode always runs first: the order within a row flips with the repetition
    first = [c.mode for c in configs if c.row == "16-sender"]
    assert first[:3] == first[3:][::-1] and first[0] is not first[3]
    # repetitions interleave: every row of repetition 0 before any of repetition 1
    reps = [c.repetition for c in configs]
    assert reps == sorted(reps)


def test_credit_grants_whole_blocks() -> None:
    # the fair split must not cut DATA_BYTES below one block: 16 senders each holding half a
    # block could reserve nothing, and nothing would ever be released
    spec = _spec("direct")
    grant = engine_config(spec, "receiver")["receiver_credit"]["grant"]
    assert grant["min_grant"] == {"data_bytes": 1 << 20, "request_slots": 1, "consumer_slots": 1}
    allocator = load_engine_config(engine_config(spec, "receiver")).receiver_credit
    assert allocator.allocator_config().min_grant  # the engine passes it to the allocator


# ------------------------------------------------------------------------------ devices


@pytest.mark.parametrize("device", ["verbs", "TCP", "", "rdma"])
def test_an_unknown_device_is_refused(device: str) -> None:
    with pytest.raises(ValueError, match="device must be one of"):
        RunConfig(row="r", mode=Mode.CREDIT, senders=4, device=device)


@pytest.mark.parametrize("path", ["staged", "mixed"])
def test_softverbs_runs_the_direct_path_only(path: str) -> None:
    # a one-sided write has no receiver code between landing and its target
    with pytest.raises(ValueError, match="tcp device"):
        RunConfig(row="r", mode=Mode.CREDIT, senders=4, path=path, device="softverbs")
    config = RunConfig(row="r", mode=Mode.CREDIT, senders=4, device="softverbs")
    assert config.as_dict()["device"] == "softverbs"  # the record's config names the device


def test_the_default_matrix_stays_on_tcp() -> None:
    assert {c.device for c in default_matrix(repetitions=1)} == {"tcp"}
    assert {c.device for c in full_matrix(repetitions=1)} == {"tcp"}
    assert {c.device for c in smoke_matrix()} == {"tcp"}


def test_the_softverbs_rows_are_the_rfc_rows_named_by_their_device() -> None:
    configs = default_matrix(repetitions=1, devices=["softverbs"])
    assert {c.device for c in configs} == {"softverbs"}
    assert {c.path for c in configs} == {"direct"}
    rows = {(c.row, c.mode) for c in configs}
    rfc = ("1-sender", "4-sender", "16-sender", "16-sender slowdown", "4-sender restart")
    assert rows == {(f"{r} softverbs", m) for r in rfc for m in Mode}
    both = default_matrix(repetitions=1, devices=["tcp", "softverbs"])
    tcp = [c for c in both if c.device == "tcp"]
    assert tcp == default_matrix(repetitions=1)  # the tcp rows are unchanged beside them
    assert len(both) == len(tcp) + len(configs)
    assert {c.row for c in smoke_matrix(device="softverbs")} == {"4-sender smoke softverbs"}
    full = full_matrix(repetitions=1, devices=["softverbs"])
    assert {c.device for c in full} == {"softverbs"} and all(
        c.row.endswith(" softverbs") for c in full
    )


@pytest.mark.parametrize("devices", [[], ["verbs"], ["tcp", "tcp"], ["softverbs", "TCP"]])
def test_a_matrix_refuses_unknown_or_repeated_devices(devices: list[str]) -> None:
    with pytest.raises(ValueError, match="devices must be distinct"):
        default_matrix(repetitions=1, devices=devices)
    with pytest.raises(ValueError, match="devices must be distinct"):
        full_matrix(repetitions=1, devices=devices)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "verbs"], "devices are tcp, softverbs"),
        (["--device", "tcp,mlx5"], "devices are tcp, softverbs"),
        (["--device", "softverbs,softverbs"], "each once"),
        (["--smoke", "--device", ","], "devices are tcp, softverbs"),
        (["--senders", "4", "--device", "softverbs", "--path", "staged"], "tcp device only"),
        # counts below 1, and options the selected matrix would silently ignore
        (["--scale", "0"], "--scale"),
        (["--repetitions", "0"], "--repetitions"),
        (["--senders", "4", "--window", "-1"], "--window"),
        (["--senders", "4", "--blocks", "0"], "--blocks"),
        (["--mode", "bogus"], "--mode: custom-row options, used only with --senders"),
        (["--lease-batch", "0", "--window", "3"], "--lease-batch, --window: custom-row"),
        (["--smoke", "--senders", "4"], "--smoke and --senders select different matrices"),
        (["--full", "--smoke"], "select different matrices"),
        (["--senders", "4", "--mode", "bogus"], "bogus"),
    ],
)
def test_the_cli_refuses_bad_input_before_running_anything(
    args: list[str], message: str, tmp_path: Path
) -> None:
    out = tmp_path / "never.jsonl"
    result = CliRunner().invoke(bench, ["incast", "--out", str(out), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not out.exists()


def test_a_softverbs_run_gets_a_private_fabric_removed_afterwards() -> None:
    tcp = RunConfig(row="r", mode=Mode.CREDIT, senders=4)
    with _runner._fabric(tcp) as folder:
        assert folder == ""
    soft = attrs.evolve(tcp, device="softverbs")
    with _runner._fabric(soft) as first, _runner._fabric(soft) as second:
        assert first != second and Path(first).is_dir() and Path(second).is_dir()
        (Path(first) / "node-dead").mkdir()  # what a SIGKILLed receiver leaves behind
        spec = _runner._spec(soft, 1, 0, first)
        assert (spec["device"], spec["fabric"]) == ("softverbs", first)
    assert not Path(first).exists() and not Path(second).exists()
    with pytest.raises(RuntimeError), _runner._fabric(soft) as failed:
        raise RuntimeError("a run that failed")
    assert not Path(failed).exists()


def test_the_tuned_window_applies_to_the_tuned_device_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[RunConfig] = []

    def fake_run(config: RunConfig, **_kw: object) -> dict[str, object]:
        ran.append(config)
        # the tuning's best window is its largest (8): throughput grows with the window
        return {
            "row": config.row,
            "throughput_gbps": float(config.window),
            "config": config.as_dict(),
        }

    monkeypatch.setattr(_runner, "run_one", fake_run)
    configs = default_matrix(repetitions=1, devices=["tcp", "softverbs"])
    base = next(c for c in configs if c.row == "16-sender" and c.mode is Mode.FIXED)
    _runner.run_matrix(configs, io.StringIO(), tune=base)
    after = ran[len(list(tune_candidates(base))) :]
    fixed16 = {
        c.device: c.window
        for c in after
        if c.mode is Mode.FIXED and c.senders == 16 and c.slots == 8
    }
    assert fixed16 == {"tcp": 8, "softverbs": 2}  # the softverbs row keeps its own window


# ------------------------------------------------------------------------------ networks


@pytest.mark.parametrize("network", ["veth", "NETNS", "", "host"])
def test_an_unknown_network_is_refused(network: str) -> None:
    with pytest.raises(ValueError, match="network must be one of"):
        RunConfig(row="r", mode=Mode.CREDIT, senders=4, network=network)


def test_netns_runs_the_tcp_device_only() -> None:
    with pytest.raises(ValueError, match="tcp device"):
        RunConfig(row="r", mode=Mode.CREDIT, senders=4, device="softverbs", network="netns")
    config = RunConfig(row="r", mode=Mode.CREDIT, senders=4, network="netns")
    assert config.as_dict()["network"] == "netns"  # the record's config names the network
    assert RunConfig(row="r", mode=Mode.CREDIT, senders=4).as_dict()["network"] == "loopback"


def test_the_netns_rows_are_the_tcp_rows_named_by_their_network() -> None:
    loopback = default_matrix(repetitions=1)
    assert {c.network for c in loopback} == {"loopback"}
    both = default_matrix(repetitions=1, networks=["loopback", "netns"])
    netns = [c for c in both if c.network == "netns"]
    assert [c for c in both if c.network == "loopback"] == loopback  # unchanged beside them
    assert [(c.row, c.mode, c.path, c.lease_batch) for c in netns] == [
        (f"{c.row} netns", c.mode, c.path, c.lease_batch) for c in loopback
    ]
    # a soft verbs fabric has no network: its rows run once, whatever the networks
    mixed = default_matrix(repetitions=1, devices=["tcp", "softverbs"], networks=["netns"])
    assert {(c.device, c.network) for c in mixed} == {("tcp", "netns"), ("softverbs", "loopback")}
    assert {c.row for c in smoke_matrix(network="netns")} == {"4-sender smoke netns"}
    full = full_matrix(repetitions=1, networks=["netns"])
    assert {c.network for c in full} == {"netns"} and all(c.row.endswith(" netns") for c in full)


@pytest.mark.parametrize(
    ("devices", "networks", "message"),
    [
        (["tcp"], [], "networks must be distinct"),
        (["tcp"], ["veth"], "networks must be distinct"),
        (["tcp"], ["netns", "netns"], "networks must be distinct"),
        (["softverbs"], ["netns"], "needs the tcp device"),
    ],
)
def test_a_matrix_refuses_unknown_repeated_or_impossible_networks(
    devices: list[str], networks: list[str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        default_matrix(repetitions=1, devices=devices, networks=networks)
    with pytest.raises(ValueError, match=message):
        full_matrix(repetitions=1, devices=devices, networks=networks)
    if len(networks) == 1:
        with pytest.raises(ValueError, match=message):
            smoke_matrix(device=devices[0], network=networks[0])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--network", "veth"], "networks are loopback, netns"),
        (["--network", "netns,netns"], "each once"),
        (["--smoke", "--network", ","], "networks are loopback, netns"),
        (["--smoke", "--device", "softverbs", "--network", "netns"], "tcp device only"),
    ],
)
def test_the_cli_refuses_a_bad_network_before_running_anything(
    args: list[str], message: str, tmp_path: Path
) -> None:
    out = tmp_path / "never.jsonl"
    result = CliRunner().invoke(bench, ["incast", "--out", str(out), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ("geteuid", "needs root"),
        ("which", "ip command"),
        ("list", "ip netns is unavailable"),
    ],
)
def test_the_cli_refuses_netns_where_namespaces_cannot_be_made(
    patch: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not root, no ``ip``, or ``ip netns`` failing: exit 2 with the reason, no traceback,
    nothing run and no output file."""
    if patch == "geteuid":
        monkeypatch.setattr(os, "geteuid", lambda: 1000)
    elif patch == "which":
        monkeypatch.setattr(shutil, "which", lambda _name: None)
    else:
        monkeypatch.setattr(os, "geteuid", lambda: 0)
        monkeypatch.setattr(shutil, "which", lambda _name: "/sbin/ip")

        def failing(*args: str) -> str:
            raise _netns.NetnsError(f"ip {' '.join(args)}: Operation not permitted")

        monkeypatch.setattr(_netns, "_ip", failing)
    ran: list[RunConfig] = []

    def recording(config: RunConfig, **_kw: object) -> dict[str, object]:
        ran.append(config)
        return {}

    monkeypatch.setattr(_runner, "run_one", recording)
    out = tmp_path / "never.jsonl"
    args = ["incast", "--smoke", "--network", "netns", "--out", str(out)]
    result = CliRunner().invoke(bench, args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    # a clean exit with a message, not an exception escaping into a traceback
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    assert ran == [] and not out.exists()


def test_a_matrix_makes_one_pair_for_its_netns_runs_and_none_without(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[_netns.NetnsPair] = []
    removed: list[_netns.NetnsPair] = []
    seen: list[tuple[str, object]] = []

    @contextlib.contextmanager
    def fake_pair() -> Iterator[_netns.NetnsPair]:
        pair = _netns.NetnsPair(rx="a-rx", tx="a-tx", rx_address="10.9.0.1", tx_address="10.9.0.2")
        made.append(pair)
        try:
            yield pair
        finally:
            removed.append(pair)

    def fake_run(config: RunConfig, *, net: object = None) -> dict[str, object]:
        seen.append((config.network, net))
        return {"row": config.row, "mode": config.mode.value}

    monkeypatch.setattr(_runner, "netns_pair", fake_pair)
    monkeypatch.setattr(_runner, "run_one", fake_run)
    _runner.run_matrix(smoke_matrix(), io.StringIO())
    assert made == [] and {n for _c, n in seen} == {None}
    seen.clear()
    configs = smoke_matrix() + smoke_matrix(network="netns")
    _runner.run_matrix(configs, io.StringIO())
    assert len(made) == 1 and removed == made  # one pair, removed after the last run
    assert {n for _c, n in seen} == {made[0]}  # handed to every run (loopback ones ignore it)
    # a failing run still removes the pair
    monkeypatch.setattr(_runner, "run_one", lambda c, **kw: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        _runner.run_matrix(smoke_matrix(network="netns"), io.StringIO())
    assert len(removed) == 2


def test_a_netns_run_tells_each_side_its_namespace_and_address() -> None:
    config = RunConfig(row="r", mode=Mode.CREDIT, senders=4, network="netns")
    pair = _netns.NetnsPair(rx="n-rx", tx="n-tx", rx_address="10.9.0.1", tx_address="10.9.0.2")
    spec = _runner._spec(config, 5000, 0, "", pair)
    assert (spec["netns_rx"], spec["rx_address"]) == ("n-rx", "10.9.0.1")
    assert (spec["netns_tx"], spec["tx_address"]) == ("n-tx", "10.9.0.2")
    plain = _runner._spec(attrs.evolve(config, network="loopback"), 5000, 0)
    assert (plain["netns_rx"], plain["netns_tx"]) == ("", "")
    assert plain["rx_address"] == plain["tx_address"] == "127.0.0.1"


def test_entering_a_missing_namespace_is_a_typed_error() -> None:
    with pytest.raises(_netns.NetnsError, match="no network namespace"):
        _netns.enter_netns("tent-incast-no-such-namespace")


def test_a_failed_setup_removes_the_namespaces_it_made(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        _netns.check_available()
    except _netns.NetnsUnavailable as exc:
        pytest.skip(str(exc))  # the one allowed skip: no ip netns on this machine
    real = _netns._ip
    added: list[str] = []

    def failing_link(*args: str) -> str:
        if args[:2] == ("link", "add"):
            raise _netns.NetnsError("ip link add: refused (test)")
        if args[:2] == ("netns", "add"):
            added.append(args[2])
        return real(*args)

    monkeypatch.setattr(_netns, "_ip", failing_link)
    with pytest.raises(_netns.NetnsError, match="refused"), _netns.netns_pair():
        pass
    assert len(added) == 2
    assert not set(added) & set(_netns.list_namespaces())


def test_a_new_pair_removes_namespaces_a_killed_runner_left_and_no_live_ones() -> None:
    try:
        _netns.check_available()
    except _netns.NetnsUnavailable as exc:
        pytest.skip(str(exc))  # the one allowed skip: no ip netns on this machine
    gone = subprocess.Popen(["true"])  # a pid that has exited (and been reaped)
    gone.wait(10)
    stale = f"{_netns.PREFIX}{gone.pid}-0-rx"
    live = f"{_netns.PREFIX}{os.getppid()}-99-rx"  # a live process's (our parent's) is kept
    for name in (stale, live):
        _netns._ip("netns", "add", name)
    try:
        with _netns.netns_pair() as pair:
            names = set(_netns.list_namespaces())
            assert {pair.rx, pair.tx, live} <= names
            assert stale not in names
    finally:
        for name in (stale, live):
            with contextlib.suppress(_netns.NetnsError):
                _netns._ip("netns", "del", name)


def test_the_default_matrix_over_netns_tunes_its_own_16_sender_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tent_transport.incast import _cli

    seen: dict[str, object] = {}

    def fake_matrix(configs: list[RunConfig], _out: object, **kw: object) -> list[object]:
        seen.update(configs=configs, tune=kw["tune"])
        return []

    monkeypatch.setattr(_cli, "check_available", lambda: None)
    monkeypatch.setattr(_cli, "run_matrix", fake_matrix)
    args = ["incast", "--network", "netns,loopback", "-r", "1", "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(bench, args)
    assert result.exit_code == 0, result.output
    tune = seen["tune"]
    assert isinstance(tune, RunConfig)
    assert (tune.row, tune.network, tune.mode) == ("16-sender netns", "netns", Mode.FIXED)
    configs = seen["configs"]
    assert isinstance(configs, list)
    assert {c.network for c in configs} == {"netns", "loopback"}


@pytest.mark.parametrize("args", [["--blocks", "0"], ["--small", "-1"], ["--rounds", "0"]])
def test_the_transport_benchmark_refuses_counts_below_one(args: list[str]) -> None:
    result = CliRunner().invoke(bench, ["transport", *args])
    assert result.exit_code == 2, result.output  # a usage error, not a ZeroDivisionError
    assert "is not in the range x>=1" in result.output


def test_the_rfc_selection_is_criterion_7s_rows_tuned_fixed_against_default_credit() -> None:
    from tent_transport.incast._config import rfc_matrix

    configs = rfc_matrix(repetitions=5)
    rows = {c.row for c in configs}
    assert rows == {"1-sender", "4-sender", "16-sender", "16-sender slowdown"}
    assert {c.mode for c in configs} == {Mode.FIXED, Mode.CREDIT}
    assert all(c.lease_batch == 0 for c in configs)  # credit at its adaptive default
    assert len(configs) == 4 * 2 * 5
    # every run moves enough blocks for a steady window: 800 per healthy row
    healthy = [c for c in configs if c.row != "16-sender slowdown"]
    assert {c.senders * c.blocks_per_sender for c in healthy} == {800}
    # which mode runs first alternates with the repetition
    order = [(c.repetition, c.mode) for c in configs if c.row == "4-sender"]
    assert [m for r, m in order if r == 0] == [m for r, m in order if r == 1][::-1]


def test_the_rfc_selection_excludes_the_others() -> None:
    runner = CliRunner()
    result = runner.invoke(bench, ["incast", "--rfc", "--smoke"])
    assert result.exit_code != 0 and "--smoke and --rfc select different matrices" in result.output


@pytest.mark.skipif(
    not hasattr(socket, "TCP_CONGESTION"), reason="no per-socket TCP congestion control here"
)
def test_a_run_names_its_data_connections_congestion_control_or_takes_the_systems() -> None:
    assert RunConfig(row="r", mode=Mode.CREDIT, senders=4).as_dict()["congestion"] == ""
    named = RunConfig(row="r", mode=Mode.CREDIT, senders=4, congestion="reno")
    assert named.as_dict()["congestion"] == "reno"  # the workers' EngineOptions take it
    with pytest.raises(ValueError, match="data_congestion_control"):
        RunConfig(row="r", mode=Mode.CREDIT, senders=4, congestion="no-such-algorithm")
