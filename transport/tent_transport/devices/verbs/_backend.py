"""Which verbs implementation a Device runs on: the real ``pyverbs`` or the soft device.

A :class:`VerbsBackend` names every class, constant and call the verbs Device uses, so the
Device's code is one text over both. :func:`probe` says whether a real RDMA device is usable
here, treating ``PyverbsRDMAError`` (no kernel RDMA), ``ImportError`` (no pyverbs) and an empty
device list alike as "no device", with the reason in words.
"""

from __future__ import annotations

import importlib
import mmap
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from . import soft

__all__ = [
    "ENUM_NAMES",
    "ProbeResult",
    "VerbsBackend",
    "load_pyverbs",
    "probe",
    "soft_backend",
]

# Every constant the verbs Device and the refusal table read (checked against real pyverbs).
ENUM_NAMES = (
    "IBV_ACCESS_LOCAL_WRITE",
    "IBV_ACCESS_REMOTE_WRITE",
    "IBV_ACCESS_REMOTE_READ",
    "IBV_QPS_RESET",
    "IBV_QPS_INIT",
    "IBV_QPS_RTR",
    "IBV_QPS_RTS",
    "IBV_QPS_ERR",
    "IBV_QPT_RC",
    "IBV_WR_RDMA_WRITE",
    "IBV_WR_RDMA_WRITE_WITH_IMM",
    "IBV_WR_RDMA_READ",
    "IBV_SEND_SIGNALED",
    "IBV_WC_SUCCESS",
    "IBV_WC_LOC_PROT_ERR",
    "IBV_WC_WR_FLUSH_ERR",
    "IBV_WC_REM_ACCESS_ERR",
    "IBV_WC_RETRY_EXC_ERR",
    "IBV_WC_RNR_RETRY_EXC_ERR",
    "IBV_WC_RDMA_WRITE",
    "IBV_WC_RDMA_READ",
    "IBV_WC_RECV",
    "IBV_WC_RECV_RDMA_WITH_IMM",
    "IBV_QP_STATE",
    "IBV_MTU_1024",
    "IBV_PORT_ACTIVE",
)


@attrs.frozen(kw_only=True)
class VerbsBackend:
    """The verbs API a Device runs on (pyverbs' module layout flattened into one value)."""

    name: str
    Context: Any
    PD: Any
    MR: Any
    CQ: Any
    QP: Any
    QPCap: Any
    QPInitAttr: Any
    QPAttr: Any
    AHAttr: Any
    GlobalRoute: Any
    GID: Any
    SGE: Any
    SendWR: Any
    RecvWR: Any
    enums: Any
    rdma_error: type[Exception]
    get_device_list: Callable[[], list[Any]]
    open_context: Callable[[str], Any]
    alloc_buffer: Callable[[Any, int], memoryview]
    """Memory a peer can reach once registered: anonymous pages (pyverbs) or the fabric (soft)."""
    set_cq_notify: Callable[[Any, Callable[[], None] | None], bool]
    """Install a completion callback; False when the backend has none (poll on a timer)."""
    arm_cq_notify: Callable[[Any], None]
    """Re-arm the one-shot callback (before polling, so no completion is missed)."""


def _flat_enums(*modules: types.ModuleType) -> types.SimpleNamespace:
    """One namespace of ``IBV_*`` constants from pyverbs' enum module(s), whichever exist."""
    found: dict[str, int] = {}
    for module in modules:
        for key, value in vars(module).items():
            if key.startswith("IBV_"):
                found[key] = int(value)
            elif isinstance(value, type) and key.startswith("ibv_"):
                # rdma-core >= 50 groups them in IntEnum classes (ibv_access_flags.IBV_...)
                for member, member_value in vars(value).items():
                    if member.startswith("IBV_"):
                        found.setdefault(member, int(member_value))
    return types.SimpleNamespace(**found)


def _anonymous_buffer(_context: Any, length: int) -> memoryview:
    return memoryview(mmap.mmap(-1, length))


def _no_notify(_cq: Any, _callback: Callable[[], None] | None) -> bool:
    return False


def _no_arm(_cq: Any) -> None:
    """pyverbs without a completion channel has nothing to arm."""


def load_pyverbs() -> VerbsBackend:
    """The real pyverbs (Debian's ``python3-pyverbs`` or the pip build; see docs/rdma.md).

    Raises ``ImportError`` when pyverbs is not installed.
    """
    # pyverbs is optional (the rdma extra): imported only when asked for
    from pyverbs import addr, cq, device, mr, pd, qp, wr  # noqa: PLC0415
    from pyverbs.pyverbs_error import PyverbsRDMAError  # noqa: PLC0415

    enum_modules = []
    for name in ("pyverbs.enums", "pyverbs.libibverbs_enums"):
        try:
            enum_modules.append(importlib.import_module(name))
        except ImportError:
            continue
    if not enum_modules:
        raise ImportError("pyverbs has neither pyverbs.enums nor pyverbs.libibverbs_enums")

    def open_context(name: str) -> Any:
        return device.Context(name=name)

    return VerbsBackend(
        name="pyverbs",
        Context=device.Context,
        PD=pd.PD,
        MR=mr.MR,
        CQ=cq.CQ,
        QP=qp.QP,
        QPCap=qp.QPCap,
        QPInitAttr=qp.QPInitAttr,
        QPAttr=qp.QPAttr,
        AHAttr=addr.AHAttr,
        GlobalRoute=addr.GlobalRoute,
        GID=addr.GID,
        SGE=wr.SGE,
        SendWR=wr.SendWR,
        RecvWR=wr.RecvWR,
        enums=_flat_enums(*enum_modules),
        rdma_error=PyverbsRDMAError,
        get_device_list=device.get_device_list,
        open_context=open_context,
        alloc_buffer=_anonymous_buffer,
        set_cq_notify=_no_notify,
        arm_cq_notify=_no_arm,
    )


def soft_backend(fabric: Path | None = None, config: Any = None) -> VerbsBackend:
    """The soft device on ``fabric`` (default :func:`soft.default_fabric`) with ``config``."""
    def open_context(name: str) -> Any:
        return soft.Context(name, fabric=fabric, config=config)

    def alloc_buffer(context: Any, length: int) -> memoryview:
        return memoryview(context.alloc_buffer(length))

    def set_notify(cq: Any, callback: Callable[[], None] | None) -> bool:
        cq.set_notify(callback)
        return True

    return VerbsBackend(
        name="soft",
        Context=soft.Context,
        PD=soft.PD,
        MR=soft.MR,
        CQ=soft.CQ,
        QP=soft.QP,
        QPCap=soft.QPCap,
        QPInitAttr=soft.QPInitAttr,
        QPAttr=soft.QPAttr,
        AHAttr=soft.AHAttr,
        GlobalRoute=soft.GlobalRoute,
        GID=soft.GID,
        SGE=soft.SGE,
        SendWR=soft.SendWR,
        RecvWR=soft.RecvWR,
        enums=soft.enums,
        rdma_error=soft.PyverbsRDMAError,
        get_device_list=soft.get_device_list,
        open_context=open_context,
        alloc_buffer=alloc_buffer,
        set_cq_notify=set_notify,
        arm_cq_notify=lambda cq: cq.req_notify(),
    )


@attrs.frozen(kw_only=True)
class ProbeResult:
    """Whether a usable RDMA device exists; ``reason`` says why not (or what was found)."""

    found: bool
    devices: tuple[str, ...]
    reason: str


def probe(loader: Callable[[], VerbsBackend] = load_pyverbs) -> ProbeResult:
    """Look for a real RDMA device. Never raises: every way of "none" is a reason.

    1. pyverbs missing (``ImportError``): "pyverbs is not installed ...";
    2. ``get_device_list()`` raising ``PyverbsRDMAError`` (no kernel RDMA, e.g. no ``ib_uverbs``);
    3. an empty device list (RDMA core loaded, no NIC or no provider).
    """
    try:
        backend = loader()
    except ImportError as exc:
        return ProbeResult(
            found=False,
            devices=(),
            reason=f"pyverbs is not installed ({exc}); see docs/rdma.md for the install",
        )
    try:
        devices = backend.get_device_list()
    except backend.rdma_error as exc:
        return ProbeResult(
            found=False,
            devices=(),
            reason=f"no RDMA device: get_device_list() failed ({exc}); is ib_uverbs loaded?",
        )
    names = tuple(
        d.name.decode() if isinstance(d.name, bytes) else str(d.name) for d in devices
    )
    if not names:
        return ProbeResult(
            found=False, devices=(), reason="no RDMA device: get_device_list() returned none"
        )
    return ProbeResult(found=True, devices=names, reason=f"found {', '.join(names)}")
