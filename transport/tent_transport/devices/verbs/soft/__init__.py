"""Soft verbs: an RC verbs device in shared memory that refuses what a real RC QP refuses.

It exposes the pyverbs classes the verbs Device uses (``Context``, ``PD``, ``MR``, ``CQ``, ``QP``,
``QPCap``, ``QPInitAttr``, ``QPAttr``, ``AHAttr``, ``GlobalRoute``, ``SGE``, ``SendWR``,
``RecvWR``, ``WC``) with pyverbs' signatures, errors (``PyverbsRDMAError.error_code``) and the
ibverbs constants in :mod:`.enums`, so the Device code is the same over both. What it emulates
and what it cannot (timing, congestion, PFC) is in ``docs/rdma.md``.
"""

from __future__ import annotations

from . import enums
from ._attrs import (
    GID,
    SGE,
    WC,
    AHAttr,
    DeviceAttr,
    GlobalRoute,
    PortAttr,
    QPAttr,
    QPCap,
    QPInitAttr,
    RecvWR,
    SendWR,
)
from ._hca import CQ, MR, PD, Context, SoftConfig, SoftDevice, default_fabric
from ._qp import QP, TRANSITIONS
from .pyverbs_error import PyverbsError, PyverbsRDMAError, PyverbsUserError

__all__ = [
    "CQ",
    "GID",
    "MR",
    "PD",
    "QP",
    "SGE",
    "TRANSITIONS",
    "WC",
    "AHAttr",
    "Context",
    "DeviceAttr",
    "GlobalRoute",
    "PortAttr",
    "PyverbsError",
    "PyverbsRDMAError",
    "PyverbsUserError",
    "QPAttr",
    "QPCap",
    "QPInitAttr",
    "RecvWR",
    "SendWR",
    "SoftConfig",
    "SoftDevice",
    "default_fabric",
    "enums",
    "get_device_list",
]


def get_device_list() -> list[SoftDevice]:
    """The soft device is always present: one device, ``soft0``."""
    return [SoftDevice(b"soft0")]
