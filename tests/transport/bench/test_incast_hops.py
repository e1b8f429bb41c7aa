"""`tent bench hops`: the hop latencies of a traced incast run, on a hand-made trace, and the
trace folder `tent bench incast` makes for it."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from tent_transport.cli import bench
from tent_transport.incast._cli import _make_env_folders
from tent_transport.incast._hops import hops

MS = 1_000_000


def _update(t: int, peer: int, seq: int, slots: int, retry: int = 0) -> dict[str, object]:
    msg = {"type": "ReceiverCreditUpdate", "sequence": seq, "grants": {"2": slots}}
    msg["retry_after_us"] = retry
    return {"t": t, "node": "receiver", "kind": "send", "peer": peer, "msg": msg}


def _write(folder: Path, name: str, events: list[dict[str, object]]) -> None:
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def test_a_grant_is_followed_from_the_release_to_the_landing(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "receiver",
        [
            {"t": 0, "node": "receiver", "kind": "release", "peer": 2},
            _update(1 * MS, 1, 1, 1),  # the freed slot, to sender 1
            _update(2 * MS, 1, 2, 1),  # a repeat: the same grants and hint
            {"t": 9 * MS, "node": "receiver", "kind": "land", "peer": 1},
        ],
    )
    _write(
        tmp_path,
        "sender-1",
        [
            {
                "t": 3 * MS,
                "node": "sender:1",
                "kind": "receive",
                "msg": {"type": "ReceiverCreditUpdate", "sequence": 1},
            },
            {"t": 4 * MS, "node": "sender:1", "kind": "reserve", "result": "blocked"},
            {"t": 5 * MS, "node": "sender:1", "kind": "reserve", "result": "reserved"},
        ],
    )
    with (tmp_path / "sender-1.jsonl").open("a") as f:
        f.write('{"t": 6, "node": "sen')  # a process killed mid-line: skipped
    result = hops(tmp_path)
    h = result["hops"]
    assert h["release_to_grant"]["median_ms"] == 1.0
    assert h["grant_to_decoded"]["median_ms"] == 2.0
    assert h["decoded_to_reserved"]["median_ms"] == 2.0
    assert h["reserved_to_landed"]["median_ms"] == 4.0
    assert h["release_to_landed"]["median_ms"] == 9.0
    m = result["messages"]
    assert (m["updates_sent_by_receiver"], m["updates_repeating_the_last"]) == (2, 1)
    assert m["updates_decoded_by_senders"] == 1 and m["blocks_landed"] == 1


def test_the_command_prints_json_and_refuses_a_folder_without_a_trace(tmp_path: Path) -> None:
    runner = CliRunner()
    empty = runner.invoke(bench, ["hops", str(tmp_path)])
    assert empty.exit_code != 0 and "no traced landing" in empty.output
    _write(tmp_path, "receiver", [{"t": 1, "node": "receiver", "kind": "land", "peer": 1}])
    ok = runner.invoke(bench, ["hops", str(tmp_path)])
    assert ok.exit_code == 0 and json.loads(ok.output)["messages"]["blocks_landed"] == 1


def test_the_incast_command_makes_the_trace_folder_before_spawning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "runs" / "trace"
    monkeypatch.setenv("TENT_INCAST_TRACE", str(folder))
    monkeypatch.delenv("TENT_INCAST_PROFILE", raising=False)
    _make_env_folders()
    assert folder.is_dir()  # a missing folder killed every worker with only an exit code
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TENT_INCAST_PROFILE", str(blocker / "profiles"))
    with pytest.raises(click.ClickException, match="TENT_INCAST_PROFILE"):
        _make_env_folders()
