"""The per-NIC bandwidth series and NIC aggregates (docs/semantics.md#bandwidth-series)."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tent_sched._bandwidth import MeterParams, NicDevice, NicSet, seed_bandwidth_bps
from tent_sched._config import RdmaSchedulingConfig
from tent_sched.errors import ConfigError, InvalidArgument, InvalidEntry

MS = 1_000_000
SEED_25G = 3.125e9  # 25 Gb/s × 1e9 / 8


def nic(speed_gbps: float = 25.0, **params: Any) -> NicDevice:
    return NicDevice("mlx5_0", link_speed_gbps=speed_gbps, params=MeterParams(**params))


def move(device: NicDevice, length: int, post_ns: int, poll_ns: int) -> None:
    """One slice posted at ``post_ns`` and polled successfully at ``poll_ns``."""
    device.note_posted(length, post_ns)
    device.note_post_ended(length, poll_ns)
    device.note_completed(length, submit_ns=post_ns, poll_ns=poll_ns, success=True)


# -- MeterParams -------------------------------------------------------------------------------


def test_meter_params_defaults_are_the_reference_values() -> None:
    params = MeterParams()
    assert params.bandwidth_learning_rate == 0.01
    assert params.transmit_bandwidth_learning_rate == 0.9
    assert params.transmit_meter_interval_ns == 10 * MS
    assert params.transmit_meter_max_interval_ns == 50 * MS
    assert (params.ewma_min_bandwidth_multiplier, params.ewma_max_bandwidth_multiplier) == (
        0.1,
        10.0,
    )
    assert (params.default_bandwidth_gbps, params.min_bandwidth_gbps) == (400.0, 10.0)
    assert params.max_bandwidth_gbps == 800.0


@pytest.mark.parametrize("field", ["bandwidth_learning_rate", "transmit_bandwidth_learning_rate"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), True, "0.5", None])
def test_learning_rate_that_is_not_a_finite_number_is_rejected(field: str, value: object) -> None:
    with pytest.raises(ConfigError):
        MeterParams(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "clamped"), [(-0.01, 0.0), (-5, 0.0), (1.01, 1.0), (2, 1.0)])
@pytest.mark.parametrize("field", ["bandwidth_learning_rate", "transmit_bandwidth_learning_rate"])
def test_learning_rate_outside_unit_interval_is_clamped_and_logged(
    field: str, value: float, clamped: float, caplog: pytest.LogCaptureFixture
) -> None:
    # the reference's setSchedulingParams clamps both rates into [0, 1]
    with caplog.at_level(logging.WARNING, logger="tent_sched"):
        assert getattr(MeterParams(**{field: value}), field) == clamped
    assert f"{field} {value!r} is outside [0, 1]" in caplog.text


def test_clamped_rates_learn_as_their_bounds() -> None:
    # α 1.0 never learns, α 0.0 takes each sample outright (docs/semantics.md#bandwidth-series)
    params = MeterParams(bandwidth_learning_rate=1.5, transmit_bandwidth_learning_rate=-0.5)
    assert (params.bandwidth_learning_rate, params.transmit_bandwidth_learning_rate) == (1.0, 0.0)


@pytest.mark.parametrize("value", [0.0, 1.0, 0, 1])
def test_learning_rate_bounds_are_accepted(value: float) -> None:
    assert MeterParams(transmit_bandwidth_learning_rate=value).transmit_bandwidth_learning_rate == (
        value
    )


def test_config_error_is_an_invalid_argument() -> None:
    with pytest.raises(InvalidArgument):
        MeterParams(bandwidth_learning_rate=float("nan"))


def test_a_zero_meter_interval_is_accepted() -> None:
    # the reference's meter tests run with interval 0: sample at every pass that asks
    assert MeterParams(transmit_meter_interval_ns=0).transmit_meter_interval_ns == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        *[("transmit_meter_interval_ns", v) for v in (-1, 1.5, True)],
        *[("transmit_meter_max_interval_ns", v) for v in (0, -1, 1.5, True)],
    ],
)
def test_intervals_must_be_ints_in_range(field: str, value: object) -> None:
    with pytest.raises(ConfigError):
        MeterParams(**{field: value})  # type: ignore[arg-type]


def test_max_interval_smaller_than_interval_is_raised_to_it() -> None:
    params = MeterParams(transmit_meter_interval_ns=20 * MS, transmit_meter_max_interval_ns=5 * MS)
    assert params.transmit_meter_max_interval_ns == 20 * MS


@pytest.mark.parametrize(
    "kwargs",
    [
        {"ewma_min_bandwidth_multiplier": 0.0},
        {"ewma_max_bandwidth_multiplier": float("inf")},
        {"ewma_min_bandwidth_multiplier": 2.0, "ewma_max_bandwidth_multiplier": 1.0},
        {"default_bandwidth_gbps": -400.0},
        {"min_bandwidth_gbps": 900.0},
    ],
)
def test_bad_multipliers_and_speeds_are_rejected(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        MeterParams(**kwargs)


def config_namespace(**overrides: object) -> SimpleNamespace:
    fields: dict[str, object] = {
        "deadline_bw_arbitration": True,
        "bandwidth_learning_rate": 0.05,
        "transmit_bandwidth_learning_rate": 0.5,
        "transmit_meter_interval_ns": 2 * MS,
        "transmit_meter_max_interval_ns": 8 * MS,
        "ewma_min_bandwidth_multiplier": 0.2,
        "ewma_max_bandwidth_multiplier": 4.0,
        "default_bandwidth_gbps": 200.0,
        "min_bandwidth_gbps": 25.0,
        "max_bandwidth_gbps": 400.0,
        "max_qp_wr": 128,
    }
    fields.update(overrides)
    return SimpleNamespace(**fields)


def test_from_config_reads_the_attributes_by_name() -> None:
    params = MeterParams.from_config(config_namespace())
    assert params == MeterParams(
        bandwidth_learning_rate=0.05,
        transmit_bandwidth_learning_rate=0.5,
        transmit_meter_interval_ns=2 * MS,
        transmit_meter_max_interval_ns=8 * MS,
        ewma_min_bandwidth_multiplier=0.2,
        ewma_max_bandwidth_multiplier=4.0,
        default_bandwidth_gbps=200.0,
        min_bandwidth_gbps=25.0,
        max_bandwidth_gbps=400.0,
    )


def test_from_config_validates_like_the_constructor() -> None:
    with pytest.raises(ConfigError):
        MeterParams.from_config(config_namespace(transmit_bandwidth_learning_rate="0.9"))
    clamped = MeterParams.from_config(config_namespace(transmit_bandwidth_learning_rate=1.5))
    assert clamped.transmit_bandwidth_learning_rate == 1.0


def test_from_config_accepts_the_rdma_scheduling_config() -> None:
    assert MeterParams.from_config(RdmaSchedulingConfig()) == MeterParams()
    custom = RdmaSchedulingConfig(transmit_meter_interval_ns=5 * MS, bandwidth_learning_rate=0.2)
    params = MeterParams.from_config(custom)
    assert (params.transmit_meter_interval_ns, params.bandwidth_learning_rate) == (5 * MS, 0.2)


# -- seeding -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("speed_gbps", "seed_bps"),
    [
        (25.0, 3.125e9),
        (10, 1.25e9),  # min_bandwidth_gbps is inclusive
        (800, 1e11),  # max_bandwidth_gbps is inclusive
        (400, 5e10),
        (0, 5e10),  # unknown speed -> default
        (9.99, 5e10),  # below the range -> default
        (800.5, 5e10),  # above the range -> default
    ],
)
def test_seed_is_link_speed_in_range_else_default(speed_gbps: float, seed_bps: float) -> None:
    assert seed_bandwidth_bps(speed_gbps, MeterParams()) == seed_bps


@pytest.mark.parametrize("speed", [-1.0, float("nan"), float("inf"), True, "25"])
def test_bad_link_speed_is_rejected(speed: object) -> None:
    with pytest.raises(InvalidArgument):
        NicDevice("mlx5_0", link_speed_gbps=speed)  # type: ignore[arg-type]


def test_new_device_seeds_both_series() -> None:
    device = nic()
    assert device.seed_bps == device.selection_bps == device.transmit_bps == SEED_25G


def test_setting_link_speed_reseeds_both_series() -> None:
    device = nic()
    move(device, 1 << 20, 0, 1000)  # selection learns something far from the seed
    device.maybe_sample_transmit(1000)
    device.note_posted(1 << 30, 2000)
    device.note_post_ended(1 << 30, 2000 + 10 * MS)
    device.note_completed(1 << 30, submit_ns=2000, poll_ns=2000 + 10 * MS, success=True)
    assert device.maybe_sample_transmit(2000 + 10 * MS)
    assert SEED_25G not in (device.selection_bps, device.transmit_bps)
    device.set_link_speed(100)
    assert device.seed_bps == device.selection_bps == device.transmit_bps == 1.25e10


def test_bad_set_link_speed_leaves_the_device_unchanged() -> None:
    device = nic()
    move(device, 4096, 0, 100)
    before = device.statistics()
    with pytest.raises(InvalidArgument):
        device.set_link_speed(-5)
    assert device.statistics() == before


@pytest.mark.parametrize("name", ["", 7, None])
def test_bad_device_name_is_rejected(name: object) -> None:
    with pytest.raises(InvalidArgument):
        NicDevice(name)  # type: ignore[arg-type]


def test_bad_device_params_or_availability_is_rejected() -> None:
    with pytest.raises(InvalidArgument):
        NicDevice("mlx5_0", params=config_namespace())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        NicDevice("mlx5_0", available=1)  # type: ignore[arg-type]


# -- busy time ---------------------------------------------------------------------------------


def test_busy_stretch_opens_at_first_post_and_closes_when_posted_bytes_return_to_zero() -> None:
    device = nic()
    device.note_posted(100, 1_000)
    device.note_posted(50, 1_500)  # already busy: does not reopen
    assert device.busy_at(2_000) == 1_000
    device.note_post_ended(100, 3_000)  # 50 bytes still posted: still open
    assert device.statistics().busy_open_since_ns == 1_000
    device.note_post_ended(50, 4_000)
    assert device.posted_bytes == 0
    assert device.statistics().busy_open_since_ns is None
    assert device.busy_at(9_000) == 3_000  # idle time after the close is not charged


def test_busy_at_includes_the_open_stretch_on_top_of_banked_time() -> None:
    device = nic()
    device.note_posted(10, 0)
    device.note_post_ended(10, 700)
    device.note_posted(10, 5_000)
    assert device.busy_at(5_250) == 950
    assert device.busy_at(4_000) == 700  # a reading before the stretch opened adds nothing


@pytest.mark.parametrize("close_ns", [1_000, 900])
def test_close_at_or_before_open_banks_nothing(close_ns: int) -> None:
    device = nic()
    device.note_posted(10, 1_000)
    device.note_post_ended(10, close_ns)
    assert device.busy_at(10_000) == 0
    assert device.statistics().busy_open_since_ns is None


def test_ending_more_than_posted_is_rejected_and_changes_nothing() -> None:
    device = nic()
    device.note_posted(10, 0)
    before = device.statistics()
    with pytest.raises(InvalidArgument):
        device.note_post_ended(11, 5)
    assert device.statistics() == before


@pytest.mark.parametrize(
    ("length", "now_ns"), [(0, 0), (-1, 0), (True, 0), (1.0, 0), (1, -1), (1, 1.5)]
)
def test_bad_post_arguments_are_rejected_and_change_nothing(length: object, now_ns: object) -> None:
    device = nic()
    device.note_posted(10, 0)
    before = device.statistics()
    with pytest.raises(InvalidArgument):
        device.note_posted(length, now_ns)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        device.note_post_ended(length, now_ns)  # type: ignore[arg-type]
    assert device.statistics() == before


# -- selection EWMA ----------------------------------------------------------------------------


def test_selection_ewma_learns_length_over_post_to_poll_latency() -> None:
    device = nic(400)  # seed 5e10
    move(device, 1 << 20, 1_000, 1_000 + 100_000)  # 1 MiB in 100 µs
    sample = (1 << 20) / (100_000 / 1e9)
    assert device.selection_bps == 0.01 * 5e10 + 0.99 * sample
    assert device.statistics().selection_samples == 1


def test_selection_ewma_with_alpha_zero_takes_the_latest_sample() -> None:
    device = nic(400, bandwidth_learning_rate=0.0)
    move(device, 1_000_000, 0, 50_000)
    assert device.selection_bps == 2e10


def test_failed_completion_teaches_selection_nothing_and_counts_no_bytes() -> None:
    device = nic()
    device.note_posted(4096, 0)
    device.note_post_ended(4096, 100)
    device.note_completed(4096, submit_ns=0, poll_ns=100, success=False)
    assert device.selection_bps == SEED_25G
    assert device.completed_bytes == 0
    assert device.statistics().selection_samples == 0


def test_completion_polled_at_its_post_time_counts_bytes_but_teaches_nothing() -> None:
    device = nic()
    device.note_completed(4096, submit_ns=500, poll_ns=500, success=True)
    assert device.completed_bytes == 4096
    assert device.selection_bps == SEED_25G


@pytest.mark.parametrize(
    "kwargs",
    [
        {"length": 0, "submit_ns": 0, "poll_ns": 1, "success": True},
        {"length": 1, "submit_ns": -1, "poll_ns": 1, "success": True},
        {"length": 1, "submit_ns": 10, "poll_ns": 9, "success": True},
        {"length": 1, "submit_ns": 0, "poll_ns": 1, "success": 1},
    ],
)
def test_bad_completion_arguments_are_rejected_and_change_nothing(kwargs: dict[str, int]) -> None:
    device = nic()
    move(device, 4096, 0, 100)
    device.maybe_sample_transmit(100)
    before = device.statistics()
    length = kwargs.pop("length")
    with pytest.raises(InvalidArgument):
        device.note_completed(length, **kwargs)  # type: ignore[arg-type]
    assert device.statistics() == before


@pytest.mark.parametrize(("latency_ns", "expected"), [(10**12, 0.1), (1, 10.0)])
def test_selection_ewma_is_clamped_to_the_seed_multipliers(
    latency_ns: int, expected: float
) -> None:
    device = nic(bandwidth_learning_rate=0.0)
    move(device, 1 << 20, 0, latency_ns)
    assert device.selection_bps == expected * SEED_25G


# -- transmit meter ----------------------------------------------------------------------------


def busy_nic(**params: Any) -> NicDevice:
    """A 25 Gb/s NIC whose meter took its baseline at t=0."""
    device = nic(**params)
    assert not device.maybe_sample_transmit(0)
    return device


def test_first_transmit_sample_only_sets_the_baseline() -> None:
    device = nic()
    move(device, 1 << 20, 0, 1_000)
    assert not device.maybe_sample_transmit(20 * MS)
    stats = device.statistics()
    assert stats.transmit_bps == SEED_25G
    assert stats.transmit_baseline_ns == 20 * MS
    assert stats.transmit_baseline_bytes == 1 << 20
    assert stats.transmit_baseline_busy_ns == 1_000


def test_transmit_sample_is_completed_bytes_over_busy_time() -> None:
    device = busy_nic()
    move(device, 40_000_000, 0, 5 * MS)  # 8e9 B/s while busy, then idle
    assert device.maybe_sample_transmit(10 * MS)
    assert device.transmit_bps == 0.9 * SEED_25G + 0.1 * (40_000_000 / (5 * MS / 1e9))
    assert device.statistics().transmit_samples == 1


def test_sample_before_the_interval_elapsed_is_ignored() -> None:
    device = busy_nic()
    move(device, 1000, 0, 100)
    before = device.statistics()
    assert not device.maybe_sample_transmit(10 * MS - 1)
    assert device.statistics() == before


def test_sample_at_exactly_one_interval_is_taken() -> None:
    device = busy_nic()
    move(device, 1000, 0, 100)
    assert device.maybe_sample_transmit(10 * MS)


@pytest.mark.parametrize("now_ns", [0, 5])
def test_sample_at_or_before_the_previous_one_is_ignored(now_ns: int) -> None:
    device = nic()
    device.maybe_sample_transmit(5)
    move(device, 1000, 5, 100)
    before = device.statistics()
    assert not device.maybe_sample_transmit(now_ns)
    assert device.statistics() == before


def test_one_sampler_per_interval() -> None:
    device = busy_nic()
    move(device, 1000, 0, 100)
    assert device.maybe_sample_transmit(10 * MS)
    move(device, 1000, 10 * MS, 10 * MS + 100)
    # A second lane polling in the same interval does not sample again.
    assert not device.maybe_sample_transmit(10 * MS + 200)
    assert not device.maybe_sample_transmit(20 * MS - 1)
    assert device.maybe_sample_transmit(20 * MS)
    assert device.statistics().transmit_samples == 2


def test_a_zero_interval_samples_at_every_later_pass() -> None:
    device = busy_nic(transmit_meter_interval_ns=0)
    move(device, 1000, 0, 100)
    assert device.maybe_sample_transmit(100)
    move(device, 1000, 100, 200)
    assert device.maybe_sample_transmit(201)  # one nanosecond on: a new interval
    assert not device.maybe_sample_transmit(201)  # the same instant is never two intervals
    assert device.statistics().transmit_samples == 2


def test_interval_longer_than_max_is_discarded_after_the_baseline_advanced() -> None:
    device = busy_nic()
    move(device, 1 << 20, 0, 1_000)
    assert not device.maybe_sample_transmit(50 * MS + 1)
    stats = device.statistics()
    assert stats.transmit_bps == SEED_25G
    assert stats.transmit_baseline_ns == 50 * MS + 1
    assert stats.transmit_baseline_bytes == 1 << 20
    # The next interval is measured from the advanced baseline, not from t=0.
    move(device, 1_000_000, 55 * MS, 55 * MS + 400_000)
    assert device.maybe_sample_transmit(61 * MS)
    assert device.transmit_bps == 0.9 * SEED_25G + 0.1 * (1_000_000 / (400_000 / 1e9))


def test_interval_of_exactly_max_is_learned() -> None:
    device = busy_nic()
    move(device, 1 << 20, 0, 1_000)
    assert device.maybe_sample_transmit(50 * MS)


def test_no_completed_bytes_in_the_interval_learns_nothing_but_advances() -> None:
    device = busy_nic()
    device.note_posted(1000, 0)  # busy but nothing completes
    assert not device.maybe_sample_transmit(10 * MS)
    stats = device.statistics()
    assert stats.transmit_bps == SEED_25G
    assert (stats.transmit_baseline_ns, stats.transmit_baseline_busy_ns) == (10 * MS, 10 * MS)


def test_no_busy_time_in_the_interval_learns_nothing() -> None:
    device = busy_nic()
    device.note_completed(1000, submit_ns=0, poll_ns=0, success=True)  # bytes, zero busy time
    assert not device.maybe_sample_transmit(10 * MS)
    assert device.transmit_bps == SEED_25G
    assert device.statistics().transmit_baseline_bytes == 1000


def test_failed_completion_resets_the_meter_so_the_next_sample_rebaselines() -> None:
    device = busy_nic()
    move(device, 1 << 20, 0, 1_000)
    device.note_posted(4096, 2_000)
    device.note_post_ended(4096, 3_000)
    device.note_completed(4096, submit_ns=2_000, poll_ns=3_000, success=False)
    assert device.statistics().transmit_baseline_ns is None
    assert not device.maybe_sample_transmit(10 * MS)  # re-baselines instead of learning
    stats = device.statistics()
    assert stats.transmit_bps == SEED_25G
    assert stats.transmit_baseline_ns == 10 * MS
    # Counters stay monotonic across the reset.
    assert stats.completed_bytes == 1 << 20
    assert stats.busy_ns == 2_000


def test_transmit_learning_rate_one_never_learns() -> None:
    device = busy_nic(transmit_bandwidth_learning_rate=1.0)
    move(device, 1 << 20, 0, 1_000)
    assert device.maybe_sample_transmit(10 * MS)
    assert device.transmit_bps == SEED_25G


def test_transmit_learning_rate_zero_takes_the_latest_sample() -> None:
    device = busy_nic(transmit_bandwidth_learning_rate=0.0)
    move(device, 2_000_000, 0, 1_000_000)
    assert device.maybe_sample_transmit(10 * MS)
    assert device.transmit_bps == 2e9


@pytest.mark.parametrize(("length", "expected"), [(1, 0.1 * SEED_25G), (10**12, 10 * SEED_25G)])
def test_transmit_estimate_is_clamped_to_the_seed_multipliers(length: int, expected: float) -> None:
    device = busy_nic(transmit_bandwidth_learning_rate=0.0)
    move(device, length, 0, 1_000_000)
    assert device.maybe_sample_transmit(10 * MS)
    assert device.transmit_bps == expected


@pytest.mark.parametrize("now_ns", [-1, 1.0, True])
def test_bad_sample_time_is_rejected_and_changes_nothing(now_ns: object) -> None:
    device = busy_nic()
    before = device.statistics()
    with pytest.raises(InvalidArgument):
        device.maybe_sample_transmit(now_ns)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        device.busy_at(now_ns)  # type: ignore[arg-type]
    assert device.statistics() == before


events = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=1 << 32),  # length
        st.integers(min_value=0, max_value=30 * MS),  # latency
        st.integers(min_value=0, max_value=30 * MS),  # gap before the next post
        st.booleans(),  # success
    ),
    max_size=40,
)


@given(
    events,
    st.floats(min_value=0.0, max_value=1.0),
    st.floats(min_value=0.0, max_value=1.0),
    st.sampled_from([0.0, 10.0, 25.0, 100.0, 400.0, 800.0, 5000.0]),
)
def test_both_series_stay_within_their_clamp(
    trace: list[tuple[int, int, int, bool]], alpha_tx: float, alpha_sel: float, speed: float
) -> None:
    params = MeterParams(
        transmit_bandwidth_learning_rate=alpha_tx, bandwidth_learning_rate=alpha_sel
    )
    device = NicDevice("mlx5_0", link_speed_gbps=speed, params=params)
    low, high = 0.1 * device.seed_bps, 10.0 * device.seed_bps
    now = 0
    for length, latency, gap, success in trace:
        device.note_posted(length, now)
        device.note_post_ended(length, now + latency)
        device.note_completed(length, submit_ns=now, poll_ns=now + latency, success=success)
        device.maybe_sample_transmit(now + latency)
        now += latency + gap
        assert low <= device.transmit_bps <= high
        assert low <= device.selection_bps <= high
        assert device.posted_bytes == 0
        assert device.busy_at(now) <= now


# -- NicSet aggregates -------------------------------------------------------------------------


def test_aggregates_sum_available_nics_only() -> None:
    nics = NicSet()
    nics.add_device("mlx5_0", link_speed_gbps=400)
    nics.add_device("mlx5_1", link_speed_gbps=200)
    nics.add_device("mlx5_2", link_speed_gbps=100, available=False)
    assert nics.estimated_bandwidth_bps() == 5e10 + 2.5e10
    assert nics.selection_bandwidth_bps() == 5e10 + 2.5e10
    nics.device("mlx5_1").set_available(False)
    assert nics.estimated_bandwidth_bps() == 5e10


def test_aggregate_without_available_nics_reads_minus_one() -> None:
    nics = NicSet()
    assert nics.estimated_bandwidth_bps() == -1.0
    nics.add_device("mlx5_0", link_speed_gbps=400, available=False)
    assert nics.estimated_bandwidth_bps() == -1.0
    assert nics.selection_bandwidth_bps() == -1.0


def test_set_keeps_registration_order_and_shares_its_params() -> None:
    params = MeterParams(bandwidth_learning_rate=0.5)
    nics = NicSet(params)
    for name in ("b", "a", "c"):
        nics.add_device(name)
    assert [d.name for d in nics] == ["b", "a", "c"]
    assert len(nics) == 3 and "a" in nics and "z" not in nics
    assert all(d.params is params for d in nics)


def test_duplicate_device_name_is_rejected_and_the_set_is_unchanged() -> None:
    nics = NicSet()
    first = nics.add_device("mlx5_0", link_speed_gbps=400)
    with pytest.raises(InvalidEntry):
        nics.add_device("mlx5_0", link_speed_gbps=100)
    assert list(nics) == [first]
    assert first.seed_bps == 5e10


def test_bad_device_arguments_leave_the_set_unchanged() -> None:
    nics = NicSet()
    with pytest.raises(InvalidArgument):
        nics.add_device("mlx5_0", link_speed_gbps=-1)
    assert len(nics) == 0


def test_unknown_device_is_an_invalid_entry() -> None:
    nics = NicSet()
    with pytest.raises(InvalidEntry):
        nics.device("mlx5_9")
    with pytest.raises(InvalidEntry):
        nics.device(["unhashable"])  # type: ignore[arg-type]


def test_set_rejects_params_of_the_wrong_type() -> None:
    with pytest.raises(InvalidArgument):
        NicSet(config_namespace())  # type: ignore[arg-type]


def test_set_available_rejects_non_bool() -> None:
    device = nic()
    with pytest.raises(InvalidArgument):
        device.set_available("no")  # type: ignore[arg-type]
    assert device.available
