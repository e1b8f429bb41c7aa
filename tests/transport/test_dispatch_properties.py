"""Whatever the interleaving of submits, completions, failures and cancels, the dispatch core
reports every transfer exactly once, never lies about moved bytes, and gives everything back."""

from __future__ import annotations

import contextlib
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from tent_transport.config import load_engine_config
from tent_transport.devices import Opcode, SliceStatus
from tent_transport.dispatch import DispatchCore, TransferRequest
from tent_transport.errors import NotSupported, TooManyRequests
from transport_fakes import CancellableFakeDevice, FakeDevice, lazy_buffer

from tent_sched import TaskStatus

KIB = 1 << 10

OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("submit"),
            st.lists(st.tuples(st.integers(1, 40), st.integers(0, 3)), min_size=1, max_size=3),
        ),
        st.tuples(st.just("finish"), st.integers(0, 1), st.integers(1, 5)),
        st.tuples(st.just("fail"), st.integers(0, 1), st.sampled_from(list(SliceStatus)[1:])),
        st.tuples(st.just("cancel"), st.integers(0, 30)),
        st.tuples(st.just("ready"), st.integers(0, 1), st.booleans()),
        st.tuples(st.just("progress")),
    ),
    max_size=40,
)


@given(
    ops=OPS,
    queue=st.booleans(),
    arbitration=st.booleans(),
    theta=st.sampled_from([0.0, 1.0, 1.5]),
)
def test_every_transfer_ends_once_and_everything_is_given_back(
    ops: list[tuple[Any, ...]], queue: bool, arbitration: bool, theta: float
) -> None:
    # one rail cancels posted work, the other answers NotSupported
    rails = [CancellableFakeDevice("a", max_qp_wr=3), FakeDevice("b", max_qp_wr=3)]
    config = load_engine_config(
        {
            "enable_runtime_queue": queue,
            "runtime_queue": {
                "deadline_aware": True,
                "mlu_local_threshold": theta,
                "max_dispatch_owners": 3,
                "max_dispatch_bytes": 64 * KIB,
                "max_outstanding_owners": 8,
            },
            "transports": {"rdma": {"deadline_bw_arbitration": arbitration, "max_qp_wr": 3}},
            "dispatch": {"slice_bytes": 8 * KIB},
        }
    )
    core = DispatchCore(config, rails)
    now = 1_000
    submitted: dict[int, int] = {}
    ended: dict[int, Any] = {}

    def pump() -> None:
        for event in core.progress(now):
            assert event.transfer_id not in ended, "reported twice"
            ended[event.transfer_id] = event

    for op in ops:
        now += 1_000
        kind = op[0]
        if kind == "submit":
            requests = [
                TransferRequest(
                    opcode=Opcode.WRITE,
                    local=lazy_buffer(kib * KIB),
                    peer=1,
                    remote_segment=1,
                    remote_offset=0,
                    length=kib * KIB,
                    deadline_ns=0 if not window else now + window * 20_000,
                )
                for kib, window in op[1]
            ]
            try:
                ids = core.submit(requests, now)
            except TooManyRequests:
                continue
            submitted.update({tid: r.length for tid, r in zip(ids, requests, strict=True)})
        elif kind == "finish":
            rails[op[1]].finish(op[2])
        elif kind == "fail":
            rails[op[1]].finish(1, op[2])
        elif kind == "cancel":
            candidates = sorted(set(submitted) - set(ended))
            if candidates:
                with contextlib.suppress(NotSupported):  # posted on a rail that cannot cancel
                    core.cancel(candidates[op[1] % len(candidates)], now)
        elif kind == "ready":
            rails[op[1]].ready = op[2]
        pump()

    # Drain: every rail ready, every posted slice completes, until nothing is left.
    for rail in rails:
        rail.ready = True
    for _ in range(200):
        now += 1_000
        for rail in rails:
            rail.finish()
        pump()
        if set(ended) == set(submitted):
            break
    assert set(ended) == set(submitted)
    for tid, event in ended.items():
        assert event.length == submitted[tid]
        if event.status is TaskStatus.COMPLETED:
            assert event.moved_bytes == event.length
        else:
            assert event.moved_bytes <= event.length
    stats = core.statistics()
    assert (stats.window_owners, stats.window_bytes) == (0, 0)
    assert stats.queued_transfers == 0 and stats.dispatched_transfers == 0
    for rail_stats in stats.rails:
        assert rail_stats.nic.posted_bytes == 0 and rail_stats.waiting_slices == 0
    if stats.queue is not None:
        assert stats.queue.outstanding_owners == 0 and stats.queue.dispatching_bytes == 0
