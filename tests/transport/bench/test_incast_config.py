"""What an incast run is: the paths (direct / staged / mixed) and the default matrix's rows."""

from __future__ import annotations

import pytest
from tent_transport.config import load_engine_config
from tent_transport.incast import Mode, RunConfig, default_matrix
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
    assert credit["grant"]["initial_grant"]["staging_slots"] == spec["lease_batch"]
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
    assert sweep == {1, 4, 8}  # beside the 16-sender row's own batch 2
    assert {c.lease_batch for c in configs if c.row == "16-sender"} == {2}
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
