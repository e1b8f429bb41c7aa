"""Garbage arguments to tent_sched's public calls: only typed errors, state unchanged (issue 10
item 12, as a class).

Every argument of every public call in the table below is replaced in turn by each garbage
value. The call may succeed (some garbage is a valid value) or raise; if it raises, the error
must be a ``tent_sched.errors`` type and ``statistics()`` must not have changed. The garbage
includes a 20,000-bit integer, so a message that formats an unbounded value fails too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

from tent_sched import (
    AdmissionQueue,
    NicDevice,
    NicSet,
    OwnerRequest,
    QueueLimits,
    Slice,
    TaskStatus,
    deadline_mlu,
    load_config,
    order_by_deadline,
    order_tiers,
    postable_prefix,
    score_devices,
    select_device,
)
from tent_sched.errors import InvalidArgument, InvalidEntry, SchedError

GARBAGE: tuple[Any, ...] = (None, 0, -1, 2**64, "", {}, [], object(), 1 << 20_000, 1.5, True)
GARBAGE_IDS = ["None", "0", "-1", "2**64", "str", "dict", "list", "object", "huge", "1.5", "True"]


def queue() -> AdmissionQueue:
    q = AdmissionQueue(
        QueueLimits(max_outstanding_owners=16, max_outstanding_bytes=1 << 20),
        deadline_aware=True,
    )
    q.try_admit(1, 8, [OwnerRequest(public_id=1, length=100), OwnerRequest(public_id=2, length=5)])
    q.pick_for_dispatch(1, 1000, now_ns=1)
    return q


def nic() -> NicDevice:
    return NicDevice("mlx0", link_speed_gbps=100.0)


def nics() -> NicSet:
    nic_set = NicSet()
    nic_set.add_device("mlx0", link_speed_gbps=100.0)
    return nic_set


@attrs.frozen
class Case:
    """One public call: build the object, call ``method`` with ``args`` / ``kwargs``."""

    name: str
    factory: Callable[[], Any] | None
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = attrs.field(factory=dict)


CASES = (
    Case("try_admit", queue, "try_admit", (2, 3, [OwnerRequest(public_id=9, length=4)])),
    Case("pick", queue, "pick_for_dispatch", (4, 1000), {"now_ns": 5, "bandwidth_bps": 1e9}),
    Case("pick_eligibility", queue, "pick_for_dispatch", (4, 1000), {"now_ns": 5}),
    Case("complete", queue, "complete", (1, TaskStatus.COMPLETED)),
    Case("cancel", queue, "cancel", (2,)),
    Case("retire_batch", queue, "retire_batch", (1,)),
    Case("status", queue, "status", (1, 1)),
    Case("owner_id_of", queue, "owner_id_of", (1, 1)),
    Case("owner", queue, "owner", (1,)),
    Case("owner_state", queue, "owner_state", (1,)),
    Case("add_degradation_hook", queue, "add_degradation_hook", (lambda *a: None,)),
    Case("nic_post", nic, "note_posted", (100, 10)),
    Case("nic_post_ended", nic, "note_post_ended", (100, 10)),
    Case(
        "nic_completed",
        nic,
        "note_completed",
        (100,),
        {"submit_ns": 1, "poll_ns": 5, "success": True},
    ),
    Case("nic_sample", nic, "maybe_sample_transmit", (10,)),
    Case("nic_speed", nic, "set_link_speed", (100.0,)),
    Case("nic_available", nic, "set_available", (True,)),
    Case("nic_busy", nic, "busy_at", (10,)),
    Case("nicset_add", nics, "add_device", ("mlx1",), {"link_speed_gbps": 100.0}),
    Case("nicset_device", nics, "device", ("mlx0",)),
    Case("mlu", None, "deadline_mlu", (0, 100, 50, 10, 1e9)),
    Case("order_by_deadline", None, "order_by_deadline", ([], 1e9, 0, 10)),
    Case("order_tiers", None, "order_tiers", ([], 1e9, 0, 10)),
    Case(
        "postable_prefix", None, "postable_prefix", ([1, 2],), {"max_qp_wr": 4, "outstanding_wr": 1}
    ),
    Case("score_devices", None, "score_devices", ([], 100)),
    Case("select_device", None, "select_device", ([], 100)),
    Case("load_config", None, "load_config", ("{}",)),
    Case(
        "queue_limits",
        None,
        "QueueLimits",
        (),
        {"max_outstanding_owners": 4, "max_outstanding_bytes": 8},
    ),
    Case(
        "owner_request", None, "OwnerRequest", (), {"public_id": 1, "length": 4, "deadline_ns": 5}
    ),
    Case("slice", None, "Slice", (), {"length": 4, "deadline_ns": 5}),
)
_FREE = {
    "deadline_mlu": deadline_mlu,
    "order_by_deadline": order_by_deadline,
    "order_tiers": order_tiers,
    "postable_prefix": postable_prefix,
    "score_devices": score_devices,
    "select_device": select_device,
    "load_config": load_config,
    "QueueLimits": QueueLimits,
    "OwnerRequest": OwnerRequest,
    "Slice": Slice,
}


def _variants(case: Case) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    out = []
    for i in range(len(case.args)):
        out.append((f"arg{i}", case.args, case.kwargs))
    for key in case.kwargs:
        out.append((key, case.args, case.kwargs))
    return out


def _snapshot(obj: Any) -> object:
    return None if obj is None else obj.statistics() if hasattr(obj, "statistics") else len(obj)


_PARAMS = [
    pytest.param(case, where, id=f"{case.name}-{where}")
    for case in CASES
    for where, _args, _kwargs in _variants(case)
]


@pytest.mark.parametrize(("case", "where"), _PARAMS)
def test_garbage_argument_gives_a_typed_error_and_changes_nothing(case: Case, where: str) -> None:
    for garbage in GARBAGE:
        obj = case.factory() if case.factory is not None else None
        call = getattr(obj, case.method) if obj is not None else _FREE[case.method]
        args, kwargs = list(case.args), dict(case.kwargs)
        if where.startswith("arg"):
            args[int(where[3:])] = garbage
        else:
            kwargs[where] = garbage
        before = _snapshot(obj)
        try:
            call(*args, **kwargs)
        except SchedError as exc:
            assert len(str(exc)) < 1000, str(exc)[:200]
            assert _snapshot(obj) == before, (case.name, where, garbage)
        except Exception as exc:
            pytest.fail(f"{case.name}({where}={type(garbage).__name__}) raised {exc!r:.200}")


# ---------------------------------------------------------------- the listed instances


def test_complete_with_a_dict_status_is_invalid_argument() -> None:
    q = queue()
    before = q.statistics()
    with pytest.raises(InvalidArgument):
        q.complete(8, {})  # type: ignore[arg-type]
    assert q.statistics() == before


def test_try_admit_with_an_int_for_owners_is_invalid_argument() -> None:
    q = queue()
    before = q.statistics()
    with pytest.raises(InvalidArgument):
        q.try_admit(2, 3, 3)  # type: ignore[arg-type]
    assert q.statistics() == before


def test_pick_with_a_non_callable_eligibility_is_invalid_argument() -> None:
    q = queue()
    before = q.statistics()
    with pytest.raises(InvalidArgument):
        q.pick_for_dispatch(2, 1000, now_ns=5, eligibility=46)  # type: ignore[arg-type]
    assert q.statistics() == before
    # an empty queue refuses it too: the argument is checked before anything is looked at
    with pytest.raises(InvalidArgument):
        AdmissionQueue(
            QueueLimits(max_outstanding_owners=1, max_outstanding_bytes=1)
        ).pick_for_dispatch(1, 1, now_ns=0, eligibility=46)  # type: ignore[arg-type]


def test_unknown_owner_lookups_stay_invalid_entry() -> None:
    with pytest.raises(InvalidEntry):
        queue().owner(99)
