"""The benchmarks run and print the JSON documents docs/benchmarks.md describes (quick mode)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tent_transport.bench import LANDING_MARK
from tent_transport.devices.tcp._mark import READ_MARK

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


# Every benchmark script and the flags docs/benchmarks.md runs it with; ``--help`` must list them.
# The click ones are this project's; the ``None`` ones belong to the transport, incast and
# mutation work, whose flags are theirs to pin (their help only has to work).
HELP_FLAGS: dict[str, tuple[str, ...] | None] = {
    "ablation.py": ("--ladder", "--kinds", "--only"),
    "checker.py": ("--model", "--workers", "--max-states", "--skip-symmetry-off"),
    "checker_memory.py": ("MODEL", "--max-states", "--bitstate"),
    "checker_plain.py": ("--rounds", "--credit-states", "--baseline-src"),
    "checker_workers.py": (
        "--models",
        "--workers",
        "--rounds",
        "--max-states",
        "--baseline-src",
        "--ceiling",
        "--ceiling-states",
        "--deadline",
        "--json",
    ),
    "control_read.py": ("--frames", "--rounds", "--payload"),
    "credit_calls.py": ("--transfers", "--congestion"),
    "credit_frame_cost.py": ("--transfers", "--rounds", "--congestion"),
    "credit_time.py": ("--transfers", "--congestion"),
    "credit_ops.py": ("--quick",),
    "door_cost.py": ("--seconds", "--rounds", "--flood"),
    "fuzz_wire.py": ("--inputs", "--seed", "--atheris-runs", "--quick"),
    "sched.py": ("--quick", "--seed"),
    "soak.py": ("--rounds", "--ticks-per-round", "--warmup-rounds", "--seed"),
    "tbf_meter.py": ("--rate-mbit", "--blocks", "--block", "--depths"),
    "engine_verbs.py": ("--blocks", "--reps"),
    "incast.py": None,
    "mutants.py": None,
    "net_abuse.py": None,
    "plot_checker_scale.py": ("INPUTS", "--out"),
    "transport.py": (
        "--blocks",
        "--small",
        "--seconds",
        "--tls / --no-tls",
        "--rounds",
        "--uvloop / --no-uvloop",
        "--congestion",
    ),
    "transport_writer.py": ("--pairs", "--blocks"),
    "verbs.py": ("--quick",),
}


def test_every_benchmark_script_is_listed() -> None:
    scripts = {p.name for p in BENCH.glob("*.py") if "__main__" in p.read_text(encoding="utf-8")}
    assert scripts == set(HELP_FLAGS)


@pytest.mark.parametrize("script", sorted(HELP_FLAGS))
def test_benchmark_help_lists_its_flags(script: str) -> None:
    flags = HELP_FLAGS[script]
    result = subprocess.run(
        [sys.executable, str(BENCH / script), "-h" if flags is not None else "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.lower().startswith("usage:"), result.stdout
    if flags is not None:  # click, answering -h as argparse did
        assert result.stdout.startswith(f"Usage: {script} [OPTIONS]"), result.stdout
        assert "-h, --help" in result.stdout
        assert all(flag in result.stdout for flag in flags), result.stdout


def _run(*args: str) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, check=False, timeout=600
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


@pytest.mark.slow
def test_credit_ops_reports_each_hot_path_beside_its_baseline() -> None:
    data = _run(str(BENCH / "credit_ops.py"), "--quick")
    for key in ("reserve_commit", "apply_update", "decode_apply"):
        entry = data[key]
        assert isinstance(entry, dict)
        assert entry["ops_per_second"] > 0 and entry["baseline_ops_per_second"] > 0
        assert entry["ratio_to_baseline"] > 0


@pytest.mark.slow  # two engine pairs in real processes
def test_credit_calls_counts_both_ends_entry_by_entry() -> None:
    data = _run(str(BENCH / "credit_calls.py"), "--transfers", "20")
    assert [row["block_bytes"] for row in data["rows"]] == [4 << 10, 4 << 20]
    for row in data["rows"]:
        for end, entry in (("sender", "_gate.py:__call__"), ("receiver", "admit_write")):
            counted = row[end]
            assert counted["calls_per_transfer"] > 0
            # every credited transfer enters the gate at the sender, admission at the receiver
            hits = [e for e in counted["entries"] if entry in e["entry"]]
            assert hits and hits[0]["entered_per_transfer"] >= 1, counted["entries"]


@pytest.mark.slow  # two engine pairs in real processes
def test_credit_time_times_both_ends_beside_the_run_without_credit() -> None:
    data = _run(str(BENCH / "credit_time.py"), "--transfers", "100")
    assert data["us_per_transfer"] > 0 and data["us_per_transfer_without_credit"] > 0
    for end, entry in (("sender", "DispatchGate.__call__"), ("receiver", "admit_write")):
        timed = data[end]
        assert timed["us_in_credit_per_transfer"] > 0
        assert timed["cpu_us_per_transfer_without_credit"] > 0
        # every credited transfer enters the gate at the sender, admission at the receiver
        hits = [e for e in timed["entries"] if entry in e["entry"]]
        assert hits and hits[0]["calls_per_transfer"] >= 1, timed["entries"]


@pytest.mark.slow  # three engine pairs in real processes
def test_credit_frame_cost_sends_one_update_frame_per_landing_without_credit() -> None:
    data = _run(str(BENCH / "credit_frame_cost.py"), "--transfers", "60", "--rounds", "1")
    (row,) = data["rounds"]
    assert row["none"]["control_frames_per_transfer"] == 0
    # the emulation happened: every landing sent an update the sender decoded, as credit's
    # grant-ahead sends one per sequential write (and nothing else, no endpoint being there;
    # the last one may still be on its way when the sender closes)
    assert 59 / 60 <= row["frame"]["control_frames_per_transfer"] <= 1
    assert row["credit"]["control_frames_per_transfer"] >= 1
    for mode in ("none", "frame", "credit"):
        assert row[mode]["sender_cpu_us"] > 0 and row[mode]["receiver_cpu_us"] > 0
    assert data["bare_us"] > 0
    assert data["bookkeeping_us"] == round(
        data["median"]["credit"]["us_per_transfer"] - data["median"]["frame"]["us_per_transfer"], 1
    )


def test_control_read_reports_both_read_sizes_per_round() -> None:
    data = _run(str(BENCH / "control_read.py"), "--frames", "200", "--rounds", "2")
    assert data["frames"] == 200
    for key in ("bounded_us_per_frame", "default_us_per_frame"):
        figures = data[key]
        assert isinstance(figures, list) and len(figures) == 2
        assert all(us > 0 for us in figures)
    assert isinstance(data["ratio"], float) and data["ratio"] > 0


@pytest.mark.slow
def test_sched_reports_queue_depths_and_arbitration_sizes() -> None:
    data = _run(str(BENCH / "sched.py"), "--quick")
    queue = data["queue"]
    assert isinstance(queue, dict)
    assert [d["depth"] for d in queue["depths"]] == [32, 128, 512, 2048, 8192, 16384]
    arbitration = data["arbitration"]
    assert isinstance(arbitration, dict)
    assert {c["slices"] for c in arbitration["cases"]} == {16, 64, 256, 1024}
    blocked = data["blocked_pick"]
    assert isinstance(blocked, dict)
    assert [c["queued"] for c in blocked["cases"]] == [128, 512, 2048]
    assert all(c["ratio"] > 0 and c["baseline_ns_per_owner"] > 0 for c in blocked["cases"])


@pytest.mark.slow
def test_verbs_reports_write_ratio_posting_depths_and_meter_depths() -> None:
    data = _run(str(BENCH / "verbs.py"), "--quick")
    write = data["one_sided_write"]
    assert isinstance(write, dict)
    assert write["ratio_to_baseline"] > 0 and write["bare_shm_copy_best_bytes_per_s"] > 0
    posting = data["posting_cost"]
    assert isinstance(posting, list)
    assert [p["depth"] for p in posting] == [1, 16, 256]
    meter = data["transmit_meter"]
    assert isinstance(meter, list)
    assert [m["depth"] for m in meter] == [1, 16, 256]
    assert all(m["transmit_samples"] > 0 for m in meter)


# --- the click CLIs pass every flag through (small runs; the JSON keys docs/benchmarks.md reads) --


def test_fuzz_wire_runs_the_inputs_and_seed_it_is_given() -> None:
    data = _run(str(BENCH / "fuzz_wire.py"), "--inputs", "300", "--seed", "5")
    assert (data["inputs"], data["seed"], data["failures"]) == (300, 5, [])


@pytest.mark.slow
def test_soak_reports_the_configuration_it_was_given() -> None:
    data = _run(
        str(BENCH / "soak.py"),
        *("--rounds", "2", "--ticks-per-round", "20", "--warmup-rounds", "1", "--seed", "3"),
    )
    config = data["config"]
    assert isinstance(config, dict)
    assert (config["rounds"], config["ticks_per_round"], config["warmup_rounds"]) == (2, 20, 1)
    assert config["seed"] == 3
    assert isinstance(data["checks"], dict) and all(data["checks"].values())


@pytest.mark.slow
def test_checker_memory_measures_the_named_model_within_its_cut() -> None:
    data = _run(str(BENCH / "checker_memory.py"), "credit/tiny", "--max-states", "500")
    assert (data["model"], data["max_states"], data["bitstate"]) == ("credit/tiny", 500, None)
    assert data["states"] == 500
    assert isinstance(data["estimated_bytes_per_state"], float)


@pytest.mark.slow
def test_checker_workers_measures_each_repeated_model(tmp_path: Path) -> None:
    out = tmp_path / "workers.json"
    data = _run(
        str(BENCH / "checker_workers.py"),
        *("--models", "adversarial/tiny", "--models", "credit/tiny"),
        *("--rounds", "1", "--workers", "2", "--max-states", "1500"),
        *("--ceiling", "2", "--ceiling-states", "300", "--json", str(out)),
    )
    assert json.loads(out.read_text(encoding="utf-8")) == data
    assert (data["workers"], data["max_states"], data["skipped"]) == ([1, 2], 1500, [])
    assert data["ceiling"]["processes"] == 2 and data["ceiling"]["ceiling"] > 0
    models = data["models"]
    assert isinstance(models, dict) and list(models) == ["adversarial/tiny", "credit/tiny"]
    for m in models.values():
        assert m["states"] == 1500
        assert [(r["round"], r["workers"]) for r in m["runs"]] == [(0, 1), (0, 2)]
        two = m["summary"]["2"]
        serial, parallel = (r["seconds"] for r in m["runs"])
        assert two["speedup"] == pytest.approx(serial / parallel, abs=0.02)
        assert two["machine_ceiling"] > 0  # the machine's own two-process ceiling, this round
        assert two["of_ceiling"] == pytest.approx(two["speedup"] / two["machine_ceiling"], abs=0.02)
        for row in (two, m["summary"]["1"]):  # memory: the estimate beside the measured growth
            assert row["estimated_bytes_per_state"] > 0
            assert row["rss_growth_bytes_per_state"] >= 0


def test_the_landing_loop_wakes_like_the_transports_receiver() -> None:
    # bench may not import the TCP transport's package (only a transport imports its own), so
    # it states the mark again: the two must not drift apart
    assert LANDING_MARK == READ_MARK


@pytest.mark.slow
def test_transport_reports_rounds_uvloop_checksum_ceiling_and_both_processes_cpu() -> None:
    data = _run(
        str(BENCH / "transport.py"),
        *("--blocks", "4", "--small", "5", "--seconds", "0", "--rounds", "2", "--no-tls"),
    )
    assert (data["blocks"], data["rounds"]) == (4, 2)
    rounds = data["per_round"]
    assert isinstance(rounds, list) and len(rounds) == 2
    for row in rounds:
        assert row["bare_mib_s"] > 0 and row["bare_verified_mib_s"] > 0
        assert row["ratio"] == pytest.approx(row["engine"]["throughput_mib_s"] / row["bare_mib_s"])
        assert row["verified_ratio"] == pytest.approx(
            row["engine"]["throughput_mib_s"] / row["bare_verified_mib_s"]
        )
        # and against that loop landing where the engine lands (not in one warm buffer)
        assert row["landing_ratio"] == pytest.approx(
            row["engine"]["throughput_mib_s"] / row["bare_landing_mib_s"]
        )
        assert row["bare_landing_receiver_cpu_us_per_block"] > 0
        assert row["engine_uvloop"]["throughput_mib_s"] > 0  # the transport extra has uvloop
        for engine in (row["engine"], row["engine_uvloop"], row["engine_no_credit"]):
            assert engine["sender_cpu_us_per_transfer"] > 0
            assert engine["receiver_cpu_us_per_transfer"] > 0
        # credit against none, same round: only the credited run exchanges control messages
        assert row["credit_ratio"] == pytest.approx(
            row["engine"]["throughput_mib_s"] / row["engine_no_credit"]["throughput_mib_s"]
        )
        assert row["engine"]["control_messages_per_transfer"] > 0
        assert row["engine_no_credit"]["control_messages_per_transfer"] == 0
    assert data["ratio"] in [row["ratio"] for row in rounds]  # the median round's
    assert data["credit_ratio"] > 0
    assert data["uvloop_ratio"] > 0 and data["checksum_ceiling"] > 0
    # the issue's goal is stated against the checksumming loop: the median of the rounds'
    assert data["goal_verified_ratio"] == 0.9
    assert min(r["verified_ratio"] for r in rounds) <= data["verified_ratio"]
    assert data["verified_ratio"] <= max(r["verified_ratio"] for r in rounds)
    assert min(r["landing_ratio"] for r in rounds) <= data["landing_ratio"]
    assert data["landing_ratio"] <= max(r["landing_ratio"] for r in rounds)
    assert data["bare"]["landing_mib_s"] in [r["bare_landing_mib_s"] for r in rounds]
    assert "engine_tls" not in data
    assert data["overhead"]["engine_us_per_4kib"] > 0
    assert data["overhead"]["uvloop_us_per_4kib"] > 0  # beside the default loop
    assert data["overhead"]["no_credit_us_per_4kib"] > 0  # and without credit
    assert data["overhead"]["no_credit_ratio"] == pytest.approx(
        data["overhead"]["no_credit_us_per_4kib"] / data["bare"]["us_per_4kib"]
    )


@pytest.mark.slow
def test_transport_writer_compares_every_writer_in_each_round() -> None:
    data = _run(str(BENCH / "transport_writer.py"), "--pairs", "2", "--blocks", "4")
    rows = data["per_pair"]
    assert isinstance(rows, list) and len(rows) == 2
    for row in rows:
        assert row["bare_mib_s"] > 0
        for writer in ("send_thread", "zero_copy", "asyncio"):
            figures = row[writer]
            assert figures["ratio"] > 0 and figures["sender_cpu_us_per_block"] > 0
            assert figures["loop_cpu_us_per_block"] > 0
    quotients = sorted(
        r["zero_copy"]["sender_cpu_us_per_block"] / r["asyncio"]["sender_cpu_us_per_block"]
        for r in rows
    )
    assert data["sender_cpu_zero_copy_over_asyncio"] == pytest.approx(sum(quotients) / 2)
    loop = sorted(
        r["send_thread"]["loop_cpu_us_per_block"] / r["zero_copy"]["loop_cpu_us_per_block"]
        for r in rows
    )
    assert data["loop_cpu_send_thread_over_zero_copy"] == pytest.approx(sum(loop) / 2)


@pytest.mark.slow
def test_checker_benchmark_reports_serial_parallel_and_baseline_runs() -> None:
    data = _run(str(BENCH / "checker.py"), "--model", "negotiation/tiny", "--workers", "2")
    assert (data["model"], data["source"]) == ("negotiation/tiny", "tent_models.configs")
    serial, parallel = data["serial"], data["parallel"]
    assert isinstance(serial, dict) and isinstance(parallel, dict)
    assert serial["distinct_states"] == 52  # the manifest count of negotiation/tiny
    assert parallel["workers"] == 2 and parallel["same_verdict_and_count"] is True
    assert {"bare_bfs_baseline", "symmetry", "known_bad"} <= set(data)
