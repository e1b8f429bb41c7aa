"""Attribute and work-request objects, with pyverbs' constructors, defaults and argument checks.

Each mirrors the pyverbs class of the same name (rdma-core 44, ``pyverbs/qp.pyx``, ``wr.pyx``,
``addr.pyx``, ``cq.pyx``): the same keyword arguments and defaults (``QPInitAttr`` defaults to UD,
``QPCap`` to 1 send / 10 receive WRs, ``SendWR`` to a signaled SEND), the same "a WR needs at least
one SGE" refusal, and chaining through ``next_wr``.
"""

from __future__ import annotations

from typing import Any

from . import enums as e
from .pyverbs_error import PyverbsUserError

__all__ = [
    "GID",
    "SGE",
    "WC",
    "AHAttr",
    "DeviceAttr",
    "GlobalRoute",
    "PortAttr",
    "QPAttr",
    "QPCap",
    "QPInitAttr",
    "RecvWR",
    "SendWR",
]


class QPCap:
    """Queue sizes of a QP (``struct ibv_qp_cap``)."""

    def __init__(
        self,
        max_send_wr: int = 1,
        max_recv_wr: int = 10,
        max_send_sge: int = 1,
        max_recv_sge: int = 1,
        max_inline_data: int = 0,
    ) -> None:
        self.max_send_wr = max_send_wr
        self.max_recv_wr = max_recv_wr
        self.max_send_sge = max_send_sge
        self.max_recv_sge = max_recv_sge
        self.max_inline_data = max_inline_data


class QPInitAttr:
    """Creation attributes of a QP (``struct ibv_qp_init_attr``); defaults to UD like pyverbs."""

    def __init__(  # noqa: PLR0917 (pyverbs takes these positionally)
        self,
        qp_type: int = e.IBV_QPT_UD,
        qp_context: object = None,
        scq: Any = None,
        rcq: Any = None,
        srq: object = None,
        cap: QPCap | None = None,
        sq_sig_all: int = 1,
    ) -> None:
        self.qp_type = qp_type
        self.qp_context = qp_context
        self.send_cq = scq
        self.recv_cq = rcq
        self.srq = srq
        self.cap = cap if cap is not None else QPCap()
        self.sq_sig_all = sq_sig_all


class GID:
    """A 16-byte GID in pyverbs' text form (eight groups of four hex digits)."""

    def __init__(self, val: str | None = None) -> None:
        self.gid = val if val is not None else ":".join(["0000"] * 8)

    def __str__(self) -> str:
        return self.gid


class GlobalRoute:
    """The GRH of an address vector (``struct ibv_global_route``)."""

    def __init__(
        self,
        dgid: GID | None = None,
        flow_label: int = 0,
        sgid_index: int = 0,
        hop_limit: int = 1,
        traffic_class: int = 0,
    ) -> None:
        self.dgid = dgid if dgid is not None else GID()
        self.flow_label = flow_label
        self.sgid_index = sgid_index
        self.hop_limit = hop_limit
        self.traffic_class = traffic_class


class AHAttr:
    """An address vector (``struct ibv_ah_attr``); a RoCE path sets ``is_global`` and ``gr``."""

    def __init__(  # noqa: PLR0917 (pyverbs takes these positionally, in this order)
        self,
        dlid: int = 0,
        sl: int = 0,
        src_path_bits: int = 0,
        static_rate: int = 0,
        is_global: int = 0,
        port_num: int = 1,
        gr: GlobalRoute | None = None,
    ) -> None:
        self.is_global = is_global
        self.dlid = dlid
        self.sl = sl
        self.src_path_bits = src_path_bits
        self.static_rate = static_rate
        self.port_num = port_num
        self.dgid = gr.dgid if gr is not None else GID()
        self.sgid_index = gr.sgid_index if gr is not None else 0
        self.hop_limit = gr.hop_limit if gr is not None else 1
        self.traffic_class = gr.traffic_class if gr is not None else 0
        self.flow_label = gr.flow_label if gr is not None else 0


class QPAttr:
    """Modify attributes of a QP (``struct ibv_qp_attr``); defaults for RESET → INIT."""

    def __init__(
        self,
        qp_state: int = e.IBV_QPS_INIT,
        cur_qp_state: int = e.IBV_QPS_RESET,
        port_num: int = 1,
        path_mtu: int = e.IBV_MTU_1024,
    ) -> None:
        self.qp_state = qp_state
        self.cur_qp_state = cur_qp_state
        self.port_num = port_num
        self.path_mtu = path_mtu
        self.qp_access_flags = 0
        self.pkey_index = 0
        self.qkey = 0
        self.rq_psn = 0
        self.sq_psn = 0
        self.dest_qp_num = 0
        self.ah_attr: AHAttr | None = None
        self.max_rd_atomic = 0
        self.max_dest_rd_atomic = 0
        self.min_rnr_timer = 0
        self.timeout = 0
        self.retry_cnt = 0
        self.rnr_retry = 0
        self.cap = QPCap(0, 0, 0, 0, 0)


class SGE:
    """One scatter/gather element: ``length`` bytes at ``addr`` under local key ``lkey``."""

    def __init__(self, addr: int, length: int, lkey: int) -> None:
        self.addr = addr
        self.length = length
        self.lkey = lkey


def _check_sges(num_sge: int, sg: list[SGE] | None) -> list[SGE]:
    if num_sge < 1 or sg is None:
        raise PyverbsUserError("A WR needs at least one SGE")
    return list(sg[:num_sge])


class SendWR:
    """A send work request; chain several through ``next_wr`` for one ``post_send``."""

    def __init__(  # noqa: PLR0917 (pyverbs takes these positionally)
        self,
        wr_id: int = 0,
        opcode: int = e.IBV_WR_SEND,
        num_sge: int = 0,
        imm_data: int = 0,
        sg: list[SGE] | None = None,
        send_flags: int = e.IBV_SEND_SIGNALED,
        next_wr: SendWR | None = None,
    ) -> None:
        self.sg_list = _check_sges(num_sge, sg)
        self.wr_id = wr_id
        self.opcode = opcode
        self.num_sge = num_sge
        self.imm_data = imm_data
        self.send_flags = send_flags
        self.next_wr = next_wr
        self.remote_addr = 0
        self.remote_rkey = 0

    def set_wr_rdma(self, rkey: int, addr: int) -> None:
        """Set the remote key and address of an RDMA WRITE / READ."""
        self.remote_rkey = rkey
        self.remote_addr = addr


class RecvWR:
    """A receive work request (rdma-core < 57 needs an SGE even for WRITE_WITH_IMM)."""

    def __init__(
        self,
        wr_id: int = 0,
        num_sge: int = 0,
        sg: list[SGE] | None = None,
        next_wr: RecvWR | None = None,
    ) -> None:
        self.sg_list = _check_sges(num_sge, sg)
        self.wr_id = wr_id
        self.num_sge = num_sge
        self.next_wr = next_wr


class WC:
    """A work completion (``struct ibv_wc``); ``imm_data`` stays in network byte order."""

    __slots__ = (
        "byte_len",
        "imm_data",
        "opcode",
        "qp_num",
        "src_qp",
        "status",
        "wc_flags",
        "wr_id",
    )

    def __init__(  # noqa: PLR0917 (pyverbs takes these positionally)
        self,
        wr_id: int = 0,
        status: int = 0,
        opcode: int = 0,
        byte_len: int = 0,
        qp_num: int = 0,
        src_qp: int = 0,
        imm_data: int = 0,
        wc_flags: int = 0,
    ) -> None:
        self.wr_id = wr_id
        self.status = status
        self.opcode = opcode
        self.byte_len = byte_len
        self.qp_num = qp_num
        self.src_qp = src_qp
        self.imm_data = imm_data
        self.wc_flags = wc_flags


class PortAttr:
    """What ``Context.query_port`` reports for the soft port."""

    def __init__(self, lid: int, gid_tbl_len: int = 1) -> None:
        self.state = e.IBV_PORT_ACTIVE
        self.lid = lid
        self.link_layer = e.IBV_LINK_LAYER_ETHERNET
        self.active_mtu = e.IBV_MTU_4096
        self.max_mtu = e.IBV_MTU_4096
        self.gid_tbl_len = gid_tbl_len
        self.active_speed = 0
        self.active_width = 0


class DeviceAttr:
    """What ``Context.query_device`` reports: the soft device's limits."""

    def __init__(self, max_qp_wr: int, max_cqe: int, max_sge: int, max_mr_size: int) -> None:
        self.max_qp_wr = max_qp_wr
        self.max_cqe = max_cqe
        self.max_sge = max_sge
        self.max_mr_size = max_mr_size
        self.max_qp = 1 << 16
        self.max_mr = 4096
        self.phys_port_cnt = 1
