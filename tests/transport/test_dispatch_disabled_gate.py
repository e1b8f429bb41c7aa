"""A DISABLED gate is no gate at the dispatch core too (docs/gate.md "exactly like no gate").

``DispatchCore(config, rails, gate=DispatchGate())`` with receiver credit off must behave as
``gate=None``: the same ids, events, errors, statuses and statistics for any workload. Before,
a submit to a receiver the disabled gate had no route for raised InvalidEntry.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from tent_transport.config import load_engine_config
from tent_transport.devices import Opcode, SliceStatus
from tent_transport.dispatch import DispatchCore, TransferPlan, TransferRequest
from tent_transport.errors import TransportError
from transport_fakes import FakeDevice, lazy_buffer

from tent_credit import DispatchGate

MIB = 1 << 20
CONFIG = {
    "enable_runtime_queue": True,
    "runtime_queue": {"deadline_aware": True, "max_dispatch_owners": 2},
    "dispatch": {"slice_bytes": MIB},
}

requests = st.builds(
    dict,
    opcode=st.sampled_from([Opcode.WRITE, Opcode.READ]),
    staged=st.booleans(),
    peer=st.integers(1, 3),
    qos_class=st.sampled_from([None, 0, 5]),
    length=st.integers(1, 3 * MIB),
    deadline_ns=st.sampled_from([0, 5_000, 10**9]),
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.lists(requests, min_size=0, max_size=3)),
        st.tuples(
            st.just("progress"),
            st.integers(0, 4),
            st.sampled_from([SliceStatus.SUCCESS, SliceStatus.TRANSPORT_ERROR]),
        ),
        st.tuples(st.just("cancel"), st.integers(1, 12)),
    ),
    max_size=12,
)


def _request(fields: dict[str, Any]) -> TransferRequest:
    read = fields["opcode"] is Opcode.READ
    return TransferRequest(
        opcode=fields["opcode"],
        local=lazy_buffer(fields["length"]),
        peer=fields["peer"],
        remote_segment=1,
        remote_offset=0,
        length=fields["length"],
        deadline_ns=fields["deadline_ns"],
        plan=TransferPlan.STAGED if fields["staged"] and not read else TransferPlan.DIRECT,
        qos_class=fields["qos_class"],
    )


def _run(script: list[tuple[Any, ...]], gate: DispatchGate | None) -> list[object]:
    rail = FakeDevice()
    core = DispatchCore(load_engine_config(CONFIG), [rail], gate=gate)
    seen: list[object] = []
    now = 0
    for step in script:
        now += 1_000
        try:
            if step[0] == "submit":
                ids = core.submit([_request(fields) for fields in step[1]], now)
                seen.append(("ids", ids))
            elif step[0] == "progress":
                rail.finish(step[1], step[2])
                seen.append(("events", core.progress(now)))
            else:
                seen.append(("cancel", core.cancel(step[1], now)))
        except TransportError as exc:
            seen.append((type(exc).__name__, str(exc)))
        for transfer_id in range(1, 13):
            try:
                seen.append(core.status(transfer_id))
            except TransportError as exc:
                seen.append(type(exc).__name__)
    seen.append(core.statistics())
    seen.append([[(s.wr_id, s.peer, s.length, s.lease) for s in post] for post in rail.posts])
    return seen


@given(steps)
def test_a_disabled_gate_dispatches_exactly_like_no_gate(script: list[tuple[Any, ...]]) -> None:
    assert _run(script, DispatchGate()) == _run(script, None)


def test_a_disabled_gate_accepts_a_submit_to_a_receiver_it_has_no_route_for() -> None:
    """The case that differed: with no route registered (a disabled gate has none to have)."""
    core = DispatchCore(load_engine_config(CONFIG), [FakeDevice()], gate=DispatchGate())
    assert core.submit([_request({"opcode": Opcode.WRITE, "staged": False, "peer": 7,
                                  "qos_class": 5, "length": MIB, "deadline_ns": 0})], 10) == (1,)
