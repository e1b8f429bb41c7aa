"""The transmit meter on a simulated wire: it recovers the wire rate, whatever the batching.

The wire is deterministic: a poller posts ``batch`` slices at once, the NIC serves their bytes back
to back at ``rate`` bytes/ns, and one poll pass collects the whole batch with a single timestamp
(the completion time of its last slice). The poller then reports every completion to the
:class:`NicDevice` and offers a transmit sample at that timestamp, as a transport does.

All durations are whole nanoseconds, so the busy time the meter sees is exact and the only error
left is the EWMA's convergence. 25 Gb/s link: seed 3.125e9 B/s, clamp [0.3125e9, 31.25e9].
"""

from __future__ import annotations

import pytest

from tent_sched._bandwidth import MeterParams, NicDevice

MIB = 1 << 20
MS = 1_000_000
SEED = 3.125e9
CLAMP_LOW, CLAMP_HIGH = 0.3125e9, 31.25e9


class Wire:
    """A NIC on a wire of ``rate`` bytes/ns, driven by a poller that posts in batches."""

    def __init__(self) -> None:
        self.device = NicDevice("mlx5_0", link_speed_gbps=25, params=MeterParams())
        self.now_ns = 0
        self.bytes_moved = 0
        self.device.maybe_sample_transmit(0)  # the meter's first call only sets its baseline

    def pass_(self, *, rate: int, slice_bytes: int, batch: int) -> None:
        """Post ``batch`` slices now, serve them, poll them all at the last one's completion."""
        assert slice_bytes % rate == 0, "keep every duration a whole number of nanoseconds"
        submit_ns = self.now_ns
        for _ in range(batch):
            self.device.note_posted(slice_bytes, submit_ns)
        poll_ns = submit_ns + batch * (slice_bytes // rate)
        for _ in range(batch):
            self.device.note_post_ended(slice_bytes, poll_ns)
            self.device.note_completed(
                slice_bytes, submit_ns=submit_ns, poll_ns=poll_ns, success=True
            )
        self.device.maybe_sample_transmit(poll_ns)  # last completion of the poll pass
        self.now_ns = poll_ns
        self.bytes_moved += batch * slice_bytes
        assert CLAMP_LOW <= self.device.transmit_bps <= CLAMP_HIGH

    def run(self, duration_ns: int, *, rate: int, slice_bytes: int, batch: int) -> None:
        end = self.now_ns + duration_ns
        while self.now_ns < end:
            self.pass_(rate=rate, slice_bytes=slice_bytes, batch=batch)

    def idle(self, gap_ns: int) -> None:
        self.now_ns += gap_ns


def relative_error(value: float, expected: float) -> float:
    return abs(value - expected) / expected


@pytest.mark.parametrize(
    ("slice_bytes", "batch"),
    [(MIB, 1), (MIB, 16), (MIB, 64), (64 * MIB, 1)],
)
def test_steady_rate_is_recovered_exactly_for_any_batch_depth(slice_bytes: int, batch: int) -> None:
    wire = Wire()
    wire.run(5_000 * MS, rate=8, slice_bytes=slice_bytes, batch=batch)
    assert relative_error(wire.device.transmit_bps, 8e9) <= 1e-9


def test_deep_batches_pin_the_selection_ewma_to_its_floor_but_not_the_transmit_meter() -> None:
    # Each slice's post-to-poll time is the whole batch's wire time: len / (64 × len / r) = r/64,
    # below the selection clamp; bytes over busy time does not depend on the batching.
    wire = Wire()
    wire.run(5_000 * MS, rate=8, slice_bytes=MIB, batch=64)
    assert wire.device.selection_bps == CLAMP_LOW
    assert relative_error(wire.device.transmit_bps, 8e9) <= 1e-9


def test_idle_gaps_between_bursts_are_not_charged() -> None:
    wire = Wire()
    while wire.now_ns < 5_000 * MS:
        for _ in range(4):  # a burst: 4 passes of 16 × 1 MiB, 8.4 ms on the wire
            wire.pass_(rate=8, slice_bytes=MIB, batch=16)
        wire.idle(12 * MS)
    wall_clock_rate = wire.bytes_moved / (wire.now_ns / 1e9)
    assert wall_clock_rate < 4e9  # the link idled more than half the time...
    assert relative_error(wire.device.transmit_bps, 8e9) <= 1e-9  # ...and the meter never saw it


def test_a_rate_drop_is_followed_within_the_expected_time() -> None:
    wire = Wire()
    wire.run(3_000 * MS, rate=8, slice_bytes=MIB, batch=1)
    assert relative_error(wire.device.transmit_bps, 8e9) <= 1e-9
    dropped_at = wire.now_ns
    while relative_error(wire.device.transmit_bps, 2e9) > 0.05:
        wire.pass_(rate=2, slice_bytes=MIB, batch=1)
        assert wire.now_ns - dropped_at < 2_000 * MS, "the meter never followed the drop"
    converged_after = wire.now_ns - dropped_at
    # α = 0.9 per ≥ 10 ms interval: 39 samples of ~10.5 ms each reach 5 % of the new rate.
    assert 300 * MS < converged_after < 700 * MS


def test_a_rate_above_the_clamp_reads_exactly_the_clamp() -> None:
    wire = Wire()
    wire.run(1_000 * MS, rate=64, slice_bytes=MIB, batch=4)  # 64e9 B/s on a 25 Gb/s seed
    assert wire.device.transmit_bps == CLAMP_HIGH


def test_the_seed_is_kept_until_the_first_usable_interval() -> None:
    wire = Wire()
    wire.pass_(rate=8, slice_bytes=MIB, batch=1)  # 131 µs: shorter than one interval
    assert wire.device.transmit_bps == SEED
