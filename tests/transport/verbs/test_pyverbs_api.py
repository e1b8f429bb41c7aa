"""The installed pyverbs has every class, constant, attribute and method the verbs Device uses.

Runs wherever pyverbs imports (no RDMA device needed: the attribute objects construct without
one). Without pyverbs it skips with the probe's reason, the only skip this suite allows.
"""

from __future__ import annotations

import inspect
import re
import socket
from typing import Any

import pytest
from tent_transport.devices.verbs import (
    ENUM_NAMES,
    VerbsBackend,
    load_pyverbs,
    probe,
    soft,
    soft_backend,
)
from tent_transport.devices.verbs.refusals import REFUSALS

_PROBE = probe()
try:
    REAL: VerbsBackend | None = load_pyverbs()
except ImportError:
    REAL = None

pytestmark = pytest.mark.skipif(REAL is None, reason=_PROBE.reason)

CLASSES = (
    "Context", "PD", "MR", "CQ", "QP", "QPCap", "QPInitAttr", "QPAttr", "AHAttr", "GlobalRoute",
    "GID", "SGE", "SendWR", "RecvWR",
)
# What the soft device has and pyverbs has not: the fabric, the step mode, the CQ callback.
SOFT_ONLY = {
    ("Context", "alloc_buffer"),
    ("Context", "release"),
    ("Context", "remote"),
    ("CQ", "set_notify"),
    ("MR", "access"),
}


def _real() -> VerbsBackend:
    assert REAL is not None
    return REAL


def test_every_constant_the_device_uses_exists_with_the_soft_value() -> None:
    real = _real().enums
    for name in ENUM_NAMES:
        assert hasattr(real, name), name
    for name in dir(soft.enums):
        if name.startswith("IBV_"):
            assert getattr(real, name) == getattr(soft.enums, name), name
    for refusal in REFUSALS.values():
        assert refusal.value(real) == refusal.value(soft.enums), refusal.case


def test_every_class_exists() -> None:
    real = _real()
    for name in CLASSES:
        assert isinstance(getattr(real, name), type), name


def _public_methods(cls: type) -> set[str]:
    return {
        name
        for name, member in vars(cls).items()
        if not name.startswith("_") and (callable(member) or isinstance(member, property))
    }


def test_every_method_the_soft_device_mirrors_exists_on_the_real_class() -> None:
    real, mirror = _real(), soft_backend()
    for name in CLASSES:
        soft_cls, real_cls = getattr(mirror, name), getattr(real, name)
        for method in _public_methods(soft_cls):
            if (name, method) in SOFT_ONLY:
                continue
            assert hasattr(real_cls, method), f"{name}.{method}"


_PARAM = re.compile(r":param (\w+):")
# In pyverbs 44's signatures (pyverbs/qp.pyx, wr.pyx) but missing from their docstrings.
_UNDOCUMENTED = {
    ("QPAttr", "__init__"): ["port_num", "path_mtu"],
    ("SendWR", "__init__"): ["next_wr"],
    ("RecvWR", "__init__"): ["next_wr"],
}
# pyverbs 44's AHAttr documents its ``gr`` argument as ``grh``.
_DOC_NAMES = {"grh": "gr"}


def _documented_params(func: Any) -> list[str]:
    return [_DOC_NAMES.get(name, name) for name in _PARAM.findall(func.__doc__ or "")]


def _soft_params(func: Any) -> list[str]:
    return [
        p.name
        for p in list(inspect.signature(func).parameters.values())[1:]
        if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    ]


@pytest.mark.parametrize(
    ("cls", "method"),
    [
        ("MR", "__init__"), ("MR", "write"), ("MR", "read"), ("CQ", "__init__"), ("CQ", "poll"),
        ("QP", "__init__"), ("QP", "modify"), ("QP", "to_init"), ("QP", "to_rtr"),
        ("QP", "to_rts"), ("QP", "post_send"), ("QP", "post_recv"), ("QPCap", "__init__"),
        ("QPInitAttr", "__init__"), ("QPAttr", "__init__"), ("SGE", "__init__"),
        ("SendWR", "__init__"), ("RecvWR", "__init__"), ("SendWR", "set_wr_rdma"),
        ("AHAttr", "__init__"), ("GlobalRoute", "__init__"),
    ],
)
def test_soft_arguments_are_a_prefix_of_pyverbs_arguments(cls: str, method: str) -> None:
    """The soft signature's names, in order, start the real one's documented ``:param:`` list."""
    real_fn = getattr(getattr(_real(), cls), method)
    documented = _documented_params(real_fn) + _UNDOCUMENTED.get((cls, method), [])
    if not documented:
        pytest.fail(f"pyverbs {cls}.{method} documents no parameters")
    ours = _soft_params(getattr(getattr(soft, cls), method))
    assert documented[: len(ours)] == ours, (cls, method, documented, ours)


def test_attribute_objects_construct_without_a_device_as_the_device_builds_them() -> None:
    b = _real()
    e = b.enums
    cap = b.QPCap(max_send_wr=256, max_recv_wr=256, max_send_sge=1, max_recv_sge=1)
    assert (cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge) == (256, 256, 1)
    default_cap = b.QPCap()
    assert (default_cap.max_send_wr, default_cap.max_recv_wr) == (1, 10)  # pyverbs' defaults
    init = b.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=None, rcq=None, cap=cap, sq_sig_all=1)
    assert init.qp_type == e.IBV_QPT_RC
    assert b.QPInitAttr().qp_type == e.IBV_QPT_UD  # the default a RC path must override
    attr = b.QPAttr(port_num=1)
    for field, value in [
        ("qp_access_flags", e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE),
        ("path_mtu", e.IBV_MTU_1024), ("dest_qp_num", 0x1234), ("rq_psn", 7), ("sq_psn", 9),
        ("max_dest_rd_atomic", 16), ("max_rd_atomic", 16), ("min_rnr_timer", 12),
        ("timeout", 14), ("retry_cnt", 7), ("rnr_retry", 7),
    ]:
        setattr(attr, field, value)
        assert getattr(attr, field) == value, field
    gid = b.GID("fe80:0000:0000:0000:5654:0000:0000:0001")
    route = b.GlobalRoute(dgid=gid, sgid_index=0)
    attr.ah_attr = b.AHAttr(port_num=1, is_global=1, gr=route, dlid=3)
    assert attr.ah_attr.dlid == 3
    assert attr.ah_attr.is_global == 1
    err = b.QPAttr(qp_state=e.IBV_QPS_ERR)
    assert err.qp_state == e.IBV_QPS_ERR
    buffer = bytearray(64)
    import ctypes

    address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    sge = b.SGE(address, 64, 0x55)
    assert (sge.addr, sge.length, sge.lkey) == (address, 64, 0x55)
    first = b.SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1, sg=[sge],
                     imm_data=socket.htonl(5), send_flags=e.IBV_SEND_SIGNALED)
    first.set_wr_rdma(0x77, 0x1000)
    second = b.SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[sge])
    first.next_wr = second  # set only: reading next_wr back raises in pyverbs 44
    assert first.imm_data == socket.htonl(5)
    recv = b.RecvWR(wr_id=3, num_sge=1, sg=[sge])
    assert recv.wr_id == 3
    with pytest.raises(Exception, match="SGE"):
        b.SendWR(opcode=e.IBV_WR_RDMA_WRITE)  # both refuse a WR without an SGE


def test_work_completions_carry_the_fields_the_device_reads() -> None:
    from pyverbs.cq import WC

    wc = WC(wr_id=5, status=10, opcode=129, byte_len=64, qp_num=3, imm_data=socket.htonl(9))
    fields = (wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.qp_num, wc.imm_data)
    assert fields == (5, 10, 129, 64, 3, socket.htonl(9))
    ours = soft.WC(wr_id=5, status=10, opcode=129, byte_len=64, qp_num=3, imm_data=9)
    assert all(hasattr(ours, f) for f in ("wr_id", "status", "opcode", "byte_len", "qp_num"))


def test_errors_carry_error_code() -> None:
    rdma_error = _real().rdma_error
    exc = rdma_error("Failed to post send", 22)
    assert exc.error_code == 22  # type: ignore[attr-defined]
    assert str(exc) == str(soft.PyverbsRDMAError("Failed to post send", 22))
