"""Deadline Scheduling's worked example "Three Slices", end to end through a NIC's own series.

A NIC has 32 MiB posted and not completed, its transmit estimate is 400 Gb/s (5e10 B/s), and a
worker is about to post three 16 MiB slices: A (10 ms left), B (2 ms left), C (no deadline).
Post order B, A, C; MLUs 0.10 (A) and 0.50 (B) in the first slot, then A ≈ 0.134.
"""

from __future__ import annotations

import pytest

from tent_sched._arbitration import Slice, order_by_deadline, postable_prefix
from tent_sched._bandwidth import NicSet
from tent_sched._mlu import deadline_mlu

MIB = 1 << 20
MS = 1_000_000
NOW = 1_000 * MS  # any steady-clock reading


@pytest.fixture
def slices() -> list[Slice]:
    return [
        Slice(length=16 * MIB, deadline_ns=NOW + 10 * MS, ident="A"),
        Slice(length=16 * MIB, deadline_ns=NOW + 2 * MS, ident="B"),
        Slice(length=16 * MIB, ident="C"),
    ]


def test_the_nic_reads_32_mib_posted_at_400_gbps() -> None:
    nics = NicSet()
    nic = nics.add_device("mlx5_0", link_speed_gbps=400)
    nic.note_posted(32 * MIB, NOW - MS)
    assert (nic.posted_bytes, nic.transmit_bps) == (32 * MIB, 5e10)


def test_post_order_is_b_a_c(slices: list[Slice]) -> None:
    nic = NicSet().add_device("mlx5_0", link_speed_gbps=400)
    nic.note_posted(32 * MIB, NOW - MS)
    order = order_by_deadline(slices, nic.transmit_bps, nic.posted_bytes, NOW)
    assert [slices[i].ident for i in order] == ["B", "A", "C"]
    post_now, later = postable_prefix(order, outstanding_wr=0)
    assert (post_now, later) == (order, [])


def test_first_slot_mlus_are_a_010_b_050_c_0(slices: list[Slice]) -> None:
    a, b, c = (deadline_mlu(32 * MIB, s.length, s.deadline_ns, NOW, 5e10) for s in slices)
    assert a == pytest.approx(0.10, abs=0.005)
    assert b == pytest.approx(0.50, abs=0.005)
    assert c == 0.0
    assert b > a > c


def test_second_slot_a_rises_to_0134_once_b_is_ahead(slices: list[Slice]) -> None:
    a = deadline_mlu(48 * MIB, 16 * MIB, NOW + 10 * MS, NOW, 5e10)
    assert a == pytest.approx(0.134, abs=0.0005)
    assert deadline_mlu(48 * MIB, 16 * MIB, 0, NOW, 5e10) == 0.0  # C: still no deadline


def test_in_arrival_order_b_would_wait_a_third_of_a_millisecond_behind_a() -> None:
    wait_s = (16 * MIB) / 5e10
    assert wait_s == pytest.approx(0.34e-3, abs=0.005e-3)


def test_a_full_queue_pair_posts_only_the_most_urgent_now(slices: list[Slice]) -> None:
    order = order_by_deadline(slices, 5e10, 32 * MIB, NOW)
    post_now, later = postable_prefix(order, max_qp_wr=256, outstanding_wr=255)
    assert [slices[i].ident for i in post_now] == ["B"]
    assert [slices[i].ident for i in later] == ["A", "C"]
