"""The incast verifier's rules, each on a hand-made record that breaks only that rule."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tent_transport.cli import bench
from tent_transport.incast import SCHEMA, jain, percentile
from tent_transport.incast._config import Condition, Mode, RunConfig
from tent_transport.incast._records import OPTIONAL, build_record, mean_open, occupancy_timeline
from tent_transport.incast._verify import verify_record, verify_records


def good(mode: str = "credit") -> dict[str, Any]:
    record: dict[str, Any] = {
        "schema_version": 2,
        "row": "4-sender",
        "mode": mode,
        "repetition": 0,
        "config": {"senders": 4, "window": 2, "lease_batch": 2, "condition": "normal"},
        "machine": {"cpus": 2},
        "started_at": "2026-12-01T12:00:00Z",
        "duration_s": 1.0,
        "throughput_gbps": 0.1,
        "throughput_mib_s": 95.0,
        "steady_s": 0.8,
        "window_throughput_mib_s": 90.0,
        "sender_p50_us": [10.0] * 4,
        "sender_p99_us": [20.0] * 4,
        "mean_sender_p99_us": 20.0,
        "worst_sender_p99_us": 20.0,
        "jain_fairness": 1.0,
        "capacity": {"request_slots": 8, "data_bytes": 8 << 22, "consumer_slots": 8},
        "peak_occupancy": {"request_slots": 8, "data_bytes": 8 << 22, "consumer_slots": 4},
        "capacity_violations": 0,
        "violations_by_resource": {"request_slots": 0, "data_bytes": 0, "consumer_slots": 0},
        "credit_stalls": 3,
        "stall_time_ms": 1.5,
        "control_messages_per_transfer": 2.0,
        "receiver_control_frames_per_transfer": 2.0,
        "control_repeats": 0,
        "control_repeat_fraction": 0.0,
        "control_bytes_per_transfer": 100.0,
        "offered": 96,
        "completed": 96,
        "failed_fenced": 0,
        "failed_other": 0,
        "failure_details": {},
        "resubmit_policy": "none",
        "integrity_errors": 0,
        "refused_writes": 0,
        "quarantined": [],
        "final_occupancy": {"request_slots": 0, "data_bytes": 0, "consumer_slots": 0},
        "credit_outstanding": {},
        "receiver_restarts": 0,
        "sender_cpu_s": 1.0,
        "receiver_cpu_s": 1.0,
        "occupancy_series": [[0.0, 1]],
    }
    assert set(record) == set(SCHEMA)
    return record


def rules(record: dict[str, Any]) -> set[str]:
    return {rule for rule, _ in verify_record(record)}


def test_a_good_record_passes() -> None:
    assert verify_record(good()) == []
    assert verify_record(good("fixed")) == []


def test_credit_mode_violation_fails() -> None:
    record = good()
    record["capacity_violations"] = 1
    record["violations_by_resource"]["request_slots"] = 1
    assert rules(record) == {"capacity"}


def test_credit_peak_above_capacity_fails_even_without_a_counted_violation() -> None:
    record = good()
    record["peak_occupancy"]["consumer_slots"] = 9
    assert rules(record) == {"capacity"}


@pytest.mark.parametrize("mode", ["disabled", "fixed"])
def test_violations_in_disabled_and_fixed_modes_are_reported_not_failed(mode: str) -> None:
    record = good(mode)
    record["capacity_violations"] = 657
    record["violations_by_resource"]["request_slots"] = 657
    record["peak_occupancy"]["request_slots"] = 11
    assert verify_record(record) == []


def test_integrity_error_fails() -> None:
    record = good("fixed")
    record["integrity_errors"] = 1
    assert rules(record) == {"integrity"}


@pytest.mark.parametrize("field", ["refused_writes", "quarantined"])
def test_a_refused_honest_sender_fails(field: str) -> None:
    record = good()
    record[field] = 1 if field == "refused_writes" else [3]
    assert rules(record) == {"refused"}


def test_completed_plus_fenced_must_equal_offered() -> None:
    record = good()
    record["completed"] = 90
    assert rules(record) == {"accounting"}
    record["failed_fenced"] = 6  # a restart's typed failures close the books
    assert verify_record(record) == []


def test_an_untyped_failure_fails_accounting() -> None:
    record = good()
    record["completed"], record["failed_other"] = 95, 1
    assert rules(record) == {"accounting"}


@pytest.mark.parametrize("field", ["final_occupancy", "credit_outstanding"])
def test_nonzero_final_occupancy_fails(field: str) -> None:
    record = good()
    record[field] = {"request_slots": 1}
    assert rules(record) == {"final_occupancy"}


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.pop("jain_fairness"),
        lambda r: r.update(offered="96"),
        lambda r: r.update(completed=True),
        lambda r: r.update(extra=1),
        lambda r: r.update(schema_version=1),  # a record of the old schema (no steady window)
    ],
)
def test_schema_mismatch_fails(change: Any) -> None:
    record = good()
    change(record)
    assert rules(record) == {"schema"}


def test_a_failed_run_and_an_empty_file_fail() -> None:
    assert rules({"row": "x", "mode": "credit", "error": "worker died"}) == {"schema"}
    assert [f.rule for f in verify_records([])] == ["schema"]


def test_tent_bench_verify_exit_code(tmp_path: Path) -> None:
    ok, bad = tmp_path / "ok.jsonl", tmp_path / "bad.jsonl"
    ok.write_text(json.dumps(good()) + "\n")
    broken = copy.deepcopy(good())
    broken["integrity_errors"] = 2
    bad.write_text(json.dumps(good()) + "\n" + json.dumps(broken) + "\n")
    runner = CliRunner()
    assert runner.invoke(bench, ["verify", str(ok)]).exit_code == 0
    result = runner.invoke(bench, ["verify", str(bad)])
    assert result.exit_code == 1
    assert "record 1" in result.output and "integrity" in result.output


def test_occupancy_timeline_counts_posts_above_capacity() -> None:
    # three writes open at once against a capacity of 2: one violation, peak 3; an end and a
    # start at the same instant free before they take
    peak, violations, series = occupancy_timeline([(0, 10), (1, 10), (2, 5), (10, 12)], 2, 0)
    assert (peak, violations) == (3, 1)
    assert series[-1][1] == 0


@pytest.mark.parametrize("field", sorted(OPTIONAL))
def test_an_optional_field_is_checked_when_present_and_may_be_absent(field: str) -> None:
    record = good()
    assert field not in record and rules(record) == set()  # the records published before it
    record[field] = 1.5
    assert rules(record) == set()
    record[field] = "1.5"
    assert rules(record) == {"schema"}


def test_mean_open_is_the_time_average_of_open_intervals() -> None:
    # two slots open over the first half of [0, 100], one over the second: 1.5 on average;
    # the parts outside the window do not count
    assert mean_open([(0, 50), (-20, 100), (0, 50)], 0, 100) == pytest.approx(2.0)
    assert mean_open([(0, 50), (0, 100)], 0, 100) == pytest.approx(1.5)
    assert mean_open([(0, 50)], 10, 10) == 0.0


def test_a_record_carries_cpu_per_block_occupancy_and_the_consumed_rate() -> None:
    config = RunConfig(
        row="1-sender",
        senders=1,
        mode=Mode.CREDIT,
        condition=Condition.NORMAL,
        block=1 << 20,
        blocks_per_sender=4,
        slots=8,
    )
    ms = 1_000_000
    sender = {
        "peer_id": 1,
        "cpu_s": 3.0,
        "cpu_run_s": 0.02,
        "stalls": 0,
        "stall_ns": 0,
        "control_frames": 4,
        "control_bytes": 0,
        # t0, end, status, detail, seq, posted: one block at a time, 10 ms each
        "results": [
            (i * 10 * ms, (i + 1) * 10 * ms, "COMPLETED", "", i, i * 10 * ms + 1) for i in range(4)
        ],
    }
    receiver = {
        "peak": {},
        "violations": {},
        "final": {},
        "integrity": {},
        "refused": 0,
        "quarantined": [],
        "landed": 4,
        "cpu_s": 2.0,
        "cpu_run_s": 0.008,
        # sender, seq, landed, released: the consumer releases one every 20 ms
        "writes": [[1, i, (i + 1) * 10 * ms, (i + 1) * 20 * ms] for i in range(4)],
    }
    record = build_record(config, [sender], [receiver], restarts=0)
    assert record["sender_cpu_ms_per_block"] == pytest.approx(5.0)
    assert record["receiver_cpu_ms_per_block"] == pytest.approx(2.0)
    # 3 blocks of 1 MiB over the consumer's 60 ms, first release to last
    assert record["consumed_mib_s"] == pytest.approx(50.0)
    assert record["mean_request_slots"] > 0
    assert set(record) == set(SCHEMA) | set(OPTIONAL)


def test_statistics_helpers() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2
    assert percentile(list(range(1, 101)), 99) == 99
    assert jain([1, 1, 1]) == pytest.approx(1.0)
    assert jain([1, 0]) == pytest.approx(0.5)


def test_report_writes_the_table_and_plots(tmp_path: Path) -> None:
    from tent_transport.incast._report import write_report

    fixed, credit = good("fixed"), good("credit")
    fixed["row"] = credit["row"] = "16-sender"
    fixed["peak_occupancy"]["request_slots"], fixed["capacity_violations"] = 22, 100
    fixed["throughput_mib_s"], credit["throughput_mib_s"] = 100.0, 50.0
    for r in (fixed, credit):
        r["config"].update(senders=16, condition="normal")
    paths = write_report([fixed, credit], tmp_path / "out")
    names = {p.name for p in paths}
    assert {
        "table.md",
        "summary.json",
        "occupancy.svg",
        "throughput_p99.svg",
        "lease_batch.svg",
    } <= names
    # every mode in the occupancy plot, the disabled one included
    disabled = good("disabled")
    disabled["row"] = "16-sender"
    disabled["config"].update(senders=16, condition="normal")
    write_report([disabled, fixed, credit], tmp_path / "all")
    occupancy = (tmp_path / "all" / "occupancy.svg").read_text()
    assert all(f"{mode} (peak" in occupancy for mode in ("disabled", "fixed", "credit"))
    assert "http" not in occupancy.replace("http://www.w3.org", "")
    table = (tmp_path / "out" / "table.md").read_text()
    assert "| 16-sender | 8 | 2 | 22 / 100 | 8 / 0 | 22 / 14657 vs 8 / 0 | 0.5 |" in table
    with pytest.raises(ValueError):
        write_report([{"error": "x"}], tmp_path / "none")


def test_the_report_names_the_plots_it_could_not_draw() -> None:
    from tent_transport.incast._report import missing_plots

    drawn = [Path("out/occupancy.svg"), Path("out/throughput_p99.svg")]
    assert missing_plots(drawn) == [
        "lease_batch.svg (needs the 16-sender lease-batch sweep (credit mode))"
    ]


@pytest.mark.parametrize(
    ("suffix", "config"),
    [("softverbs", {"device": "softverbs"}), ("netns", {"network": "netns"})],
)
def test_a_device_or_network_row_is_set_beside_the_rfc_row_it_repeats(
    suffix: str, config: dict[str, str]
) -> None:
    from tent_transport.incast._report import comparison, medians

    fixed, credit = good("fixed"), good("credit")
    for r in (fixed, credit):
        r["row"] = f"16-sender {suffix}"
        r["config"].update(senders=16, **config)
    (row,) = comparison(medians([fixed, credit]))
    assert row["row"] == f"16-sender {suffix}"
    assert (row["rfc"], row["rfc_throughput_delta"]) == ("22 / 14657 vs 8 / 0", "+0.41%")
    assert verify_records([fixed, credit]) == []  # such a record is an ordinary record
