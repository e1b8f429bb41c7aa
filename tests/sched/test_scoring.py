"""Device selection: inflight bytes over the selection EWMA (Deadline Scheduling "Selection
EWMA")."""

from __future__ import annotations

import pytest

from tent_sched._bandwidth import MeterParams, NicDevice, NicSet
from tent_sched._scoring import score_devices, select_device
from tent_sched.errors import InvalidArgument, InvalidEntry

MIB = 1 << 20


def two_nics() -> NicSet:
    nics = NicSet()
    nics.add_device("mlx5_0", link_speed_gbps=400)  # 5e10 B/s
    nics.add_device("mlx5_1", link_speed_gbps=200)  # 2.5e10 B/s
    return nics


def test_scores_are_inflight_plus_slice_over_the_selection_ewma() -> None:
    nics = two_nics()
    nics.device("mlx5_0").note_posted(64 * MIB, 0)
    assert score_devices(nics, MIB) == {
        "mlx5_0": (64 * MIB + MIB) / 5e10,
        "mlx5_1": MIB / 2.5e10,
    }


def test_the_faster_idle_nic_wins() -> None:
    assert select_device(two_nics(), MIB) == "mlx5_0"


def test_a_backed_up_nic_loses_to_a_slower_idle_one() -> None:
    nics = two_nics()
    nics.device("mlx5_0").note_posted(64 * MIB, 0)
    assert select_device(nics, MIB) == "mlx5_1"


def test_selection_reads_the_selection_ewma_not_the_transmit_estimate() -> None:
    params = MeterParams(bandwidth_learning_rate=0.0)
    fast, slow = NicDevice("a", params=params), NicDevice("b", params=params)
    # 'a' is seen slow by selection (its slices queued), 'b' fast; transmit is untouched.
    fast.note_completed(MIB, submit_ns=0, poll_ns=1_000_000, success=True)
    slow.note_completed(MIB, submit_ns=0, poll_ns=10_000, success=True)
    assert fast.transmit_bps == slow.transmit_bps
    assert select_device([fast, slow], MIB) == "b"


def test_ties_go_to_the_first_nic_in_iteration_order() -> None:
    nics = NicSet()
    for name in ("mlx5_2", "mlx5_0", "mlx5_1"):
        nics.add_device(name, link_speed_gbps=100)
    assert select_device(nics, MIB) == "mlx5_2"  # registration order, not name order
    assert select_device(list(nics)[::-1], MIB) == "mlx5_1"


def test_unavailable_nics_are_neither_scored_nor_selected() -> None:
    nics = two_nics()
    nics.device("mlx5_0").set_available(False)
    assert score_devices(nics, MIB) == {"mlx5_1": MIB / 2.5e10}
    assert select_device(nics, MIB) == "mlx5_1"


def test_no_available_nic_is_an_invalid_entry() -> None:
    nics = two_nics()
    for device in nics:
        device.set_available(False)
    assert score_devices(nics, MIB) == {}
    with pytest.raises(InvalidEntry):
        select_device(nics, MIB)
    with pytest.raises(InvalidEntry):
        select_device([], MIB)


@pytest.mark.parametrize("slice_bytes", [0, -1, 1.5, True])
def test_bad_slice_size_is_rejected(slice_bytes: object) -> None:
    with pytest.raises(InvalidArgument):
        select_device(two_nics(), slice_bytes)  # type: ignore[arg-type]


def test_non_devices_and_duplicate_names_are_rejected() -> None:
    nic = NicDevice("mlx5_0")
    with pytest.raises(InvalidArgument):
        score_devices([nic, "mlx5_1"], MIB)  # type: ignore[list-item]
    with pytest.raises(InvalidArgument):
        select_device([nic, NicDevice("mlx5_0")], MIB)


def test_scoring_changes_nothing() -> None:
    nics = two_nics()
    nics.device("mlx5_1").note_posted(MIB, 0)
    before = [d.statistics() for d in nics]
    select_device(nics, MIB)
    score_devices(nics, MIB)
    assert [d.statistics() for d in nics] == before
