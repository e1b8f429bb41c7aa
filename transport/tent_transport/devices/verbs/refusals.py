"""What a real RC QP refuses, and how: one table for the soft device's tests and a real NIC's run.

Each :class:`Refusal` names a case, whether the outcome is a **completion** status (the verbs
call succeeded and a work completion carries it) or an **errno** (the verbs call itself raised
``PyverbsRDMAError`` with that ``error_code``), which provider the soft device follows for it
(``follows``) and where that provider says so (``source``): Linux rxe's source
(``drivers/infiniband/sw/rxe``, the kernel of 2024-2025) and its rdma-core 44 provider
(``providers/rxe/rxe.c``), the rdma-core tests or man pages where they state the same, the
InfiniBand specification's rules where rdma-core quotes them. ``elsewhere`` names providers known
to report the case otherwise. A row the soft device decides on its own says ``follows="ours"``.

``tests/transport/verbs/test_soft_refusals.py`` runs every row against the soft device and
``test_real_device.py`` runs the rows that follow a provider against a NIC when the probe finds
one, accepting the value of any provider the row names.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

import attrs

__all__ = ["REFUSALS", "Refusal"]


@attrs.frozen(kw_only=True)
class Refusal:
    """One case: ``expected`` is an ``IBV_WC_*`` name (completion) or an errno name.

    ``follows`` is ``"rxe"`` when the soft device reports what Linux rxe reports, ``"ours"`` when
    the soft device chose (no provider reports it that way). ``elsewhere`` holds
    ``(provider, value)`` pairs of providers known to report another value.
    """

    case: str
    kind: Literal["completion", "errno"]
    expected: str
    source: str
    follows: Literal["rxe", "ours"] = "rxe"
    elsewhere: tuple[tuple[str, str], ...] = ()

    def value(self, enums: Any) -> int:
        """The expected number: from the backend's ``enums`` (completion) or :mod:`errno`."""
        return self._number(self.expected, enums)

    def accepted(self, enums: Any) -> frozenset[int]:
        """Every value a real provider may report: ``expected`` and those of ``elsewhere``."""
        names = (self.expected, *(value for _, value in self.elsewhere))
        return frozenset(self._number(name, enums) for name in names)

    def _number(self, name: str, enums: Any) -> int:
        if self.kind == "completion":
            return int(getattr(enums, name))
        return int(getattr(errno, name))


def _table(*rows: Refusal) -> Mapping[str, Refusal]:
    table = {row.case: row for row in rows}
    assert len(table) == len(rows), "duplicate refusal case"
    return MappingProxyType(table)


_RESP = "rxe_resp.c"
_CLASS_C_ACCESS = (
    "RESPST_ERR_RKEY_VIOLATION: class C, NAK remote access error (rxe_comp.c check_ack: "
    "IB_WC_REM_ACCESS_ERR)"
)
_CLASS_C_INVALID = (
    "class C, NAK invalid request (rxe_comp.c check_ack: AETH_NAK_INVALID_REQ → "
    "IB_WC_REM_INV_REQ_ERR)"
)
_MLX5_STATE = (
    ("mlx5", "ENOMEM"),  # rdma-core >= 40 (988f90bc1): legacy post_send's max-SGE check
)

REFUSALS: Mapping[str, Refusal] = _table(
    # --- the responder, in rxe's order: opcode and QP access, resources / RNR, rkey and range
    Refusal(
        case="write_through_qp_without_remote_write",
        kind="completion",
        expected="IBV_WC_REM_INV_REQ_ERR",
        source=f"{_RESP} check_op_valid: the target QP's qp_access_flags lack "
        f"IB_ACCESS_REMOTE_WRITE → RESPST_ERR_UNSUPPORTED_OPCODE, {_CLASS_C_INVALID}",
    ),
    Refusal(
        case="read_through_qp_without_remote_read",
        kind="completion",
        expected="IBV_WC_REM_INV_REQ_ERR",
        source=f"{_RESP} check_op_valid: the target QP's qp_access_flags lack "
        f"IB_ACCESS_REMOTE_READ → RESPST_ERR_UNSUPPORTED_OPCODE, {_CLASS_C_INVALID}",
    ),
    Refusal(
        case="read_with_zero_max_dest_rd_atomic",
        kind="completion",
        expected="IBV_WC_REM_INV_REQ_ERR",
        source=f"{_RESP} check_resource: a READ with max_dest_rd_atomic 0 → "
        f"RESPST_ERR_TOO_MANY_RDMA_ATM_REQ, {_CLASS_C_INVALID}",
    ),
    Refusal(
        case="write_imm_without_receive",
        kind="completion",
        expected="IBV_WC_RNR_RETRY_EXC_ERR",
        source=f"{_RESP} check_resource: no posted receive → RESPST_ERR_RNR (RNR NAK); "
        "rxe_comp.c: rnr_retry (0 here) exhausted → IB_WC_RNR_RETRY_EXC_ERR",
    ),
    Refusal(
        case="write_imm_with_bad_rkey_without_receive",
        kind="completion",
        expected="IBV_WC_RNR_RETRY_EXC_ERR",
        source=f"{_RESP}: check_resource (no receive: RNR) runs before check_rkey, so the "
        "missing receive decides, not the rkey",
    ),
    Refusal(
        case="zero_length_write_with_invalid_rkey",
        kind="completion",
        expected="IBV_WC_SUCCESS",
        source=f"{_RESP} check_rkey: 'A zero-byte op is not required to set an addr or rkey' "
        "→ RESPST_EXECUTE (not a refusal: a naive rkey check would refuse it)",
    ),
    Refusal(
        case="write_without_remote_write_access",
        kind="completion",
        expected="IBV_WC_REM_ACCESS_ERR",
        source=f"{_RESP} check_rkey: lookup_mr(pd, IB_ACCESS_REMOTE_WRITE, rkey) fails on the "
        f"MR's access → {_CLASS_C_ACCESS}; rdma-core tests/test_mr.py::"
        "test_mr_rereg_access_bad_flow expects 'Remote access error' for such an MR",
    ),
    Refusal(
        case="read_without_remote_read_access",
        kind="completion",
        expected="IBV_WC_REM_ACCESS_ERR",
        source=f"{_RESP} check_rkey: lookup_mr(pd, IB_ACCESS_REMOTE_READ, rkey) fails on the "
        f"MR's access → {_CLASS_C_ACCESS}",
    ),
    Refusal(
        case="write_after_deregistration",
        kind="completion",
        expected="IBV_WC_REM_ACCESS_ERR",
        source=f"{_RESP} check_rkey: lookup_mr finds no valid MR for the rkey → "
        f"{_CLASS_C_ACCESS}; rdma-core tests/test_mr.py::test_mw_type2_invalidate_dealloc "
        "expects 'Remote access error' for the like case of a deallocated MW",
    ),
    Refusal(
        case="write_with_unknown_rkey",
        kind="completion",
        expected="IBV_WC_REM_ACCESS_ERR",
        source=f"{_RESP} check_rkey: lookup_mr finds no MR for the rkey → {_CLASS_C_ACCESS}",
    ),
    Refusal(
        case="write_out_of_range",
        kind="completion",
        expected="IBV_WC_REM_ACCESS_ERR",
        source=f"{_RESP} check_rkey: mr_check_range fails → {_CLASS_C_ACCESS}",
    ),
    Refusal(
        case="responder_receive_after_access_violation",
        kind="completion",
        expected="IBV_WC_WR_FLUSH_ERR",
        source=f"{_RESP}: a class C error sets goto_error, the responder QP moves to ERR "
        "(rxe_qp_error) and check_resource completes each posted receive with "
        "IB_WC_WR_FLUSH_ERR (the status of the target's receive after a WRITE out of range)",
    ),
    Refusal(
        case="responder_receive_of_write_imm_access_violation",
        kind="completion",
        expected="IBV_WC_REM_ACCESS_ERR",
        source=f"{_RESP}: the receive check_resource took is completed by do_complete with "
        "qp->resp.status (IB_WC_REM_ACCESS_ERR) before the QP goes to ERR (the status of the "
        "target's receive after a WRITE_WITH_IMM with a bad rkey)",
    ),
    # --- the requester
    Refusal(
        case="local_sge_outside_mr",
        kind="completion",
        expected="IBV_WC_LOC_PROT_ERR",
        source="rxe_req.c rxe_requester: finish_packet's copy_data fails (-EFAULT) → "
        "IB_WC_LOC_PROT_ERR, before the packet is sent",
    ),
    Refusal(
        case="target_qp_not_ready",
        kind="completion",
        expected="IBV_WC_RETRY_EXC_ERR",
        source="rxe_recv.c check_type_state drops requests to a responder that is not ready; "
        "rxe_comp.c: the retransmit timer exhausts retry_cnt → IB_WC_RETRY_EXC_ERR",
    ),
    Refusal(
        case="outstanding_wr_at_err",
        kind="completion",
        expected="IBV_WC_WR_FLUSH_ERR",
        source="rxe_comp.c: a failed WR moves the QP to ERR (rxe_qp_error) and every later WR "
        "of it completes with IB_WC_WR_FLUSH_ERR (flush_send_wqe)",
    ),
    # --- verbs calls
    Refusal(
        case="post_send_in_reset",
        kind="errno",
        expected="EINVAL",
        source="rxe_verbs.c rxe_post_send: qp_state < IB_QPS_RTS → -EINVAL (rdma-core 44's rxe "
        "returns it from the doorbell); IBA 1.5 C10-22 as quoted by rdma-core 988f90bc1; "
        "rdma-core tests/utils.py::post_sq_state_bad_flow (a UD QP, ibv_wr_complete)",
        elsewhere=_MLX5_STATE,
    ),
    Refusal(
        case="post_send_before_rts",
        kind="errno",
        expected="EINVAL",
        source="rxe_verbs.c rxe_post_send: qp_state < IB_QPS_RTS → -EINVAL (here RTR); "
        "IBA 1.5 C10-25 (INIT) and C10-29 (RTR) as quoted by rdma-core 988f90bc1",
        elsewhere=_MLX5_STATE,
    ),
    Refusal(
        case="post_recv_in_reset",
        kind="errno",
        expected="EINVAL",
        source="rdma-core 44 providers/rxe/rxe.c rxe_post_recv: state RESET → EINVAL ('see "
        "C10-97.2.1'); mlx5 likewise; rdma-core tests/utils.py::post_rq_state_bad_flow",
    ),
    Refusal(
        case="send_queue_full",
        kind="errno",
        expected="ENOMEM",
        source="rdma-core 44 providers/rxe/rxe.c post_one_send: queue_full → ENOMEM (mlx5: "
        "mlx5_wq_overflow → ENOMEM)",
    ),
    Refusal(
        case="recv_queue_full",
        kind="errno",
        expected="ENOMEM",
        source="rdma-core 44 providers/rxe/rxe.c rxe_post_one_recv: queue_full → ENOMEM; "
        "rdma-core tests/utils.py::full_rq_bad_flow",
    ),
    Refusal(
        case="recv_too_many_sges",
        kind="errno",
        expected="EINVAL",
        source="rdma-core 44 providers/rxe/rxe.c rxe_post_one_recv: num_sge > max_sge → EINVAL; "
        "rdma-core tests/utils.py::create_rq_with_larger_sgl_bad_flow",
    ),
    Refusal(
        case="reg_mr_remote_write_without_local_write",
        kind="errno",
        expected="EINVAL",
        source="ibv_reg_mr(3): with IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_LOCAL_WRITE must be set; "
        "include/rdma/ib_verbs.h ib_check_mr_access → -EINVAL; rdma-core tests/test_mr.py::"
        "test_reg_mr_bad_flags",
    ),
    Refusal(
        case="create_cq_above_max_cqe",
        kind="errno",
        expected="EINVAL",
        source="rxe_cq.c rxe_cq_chk_attr: cqe > max_cqe → -EINVAL; rdma-core tests/test_cq.py::"
        "test_create_cq_bad_flow",
    ),
    Refusal(
        case="illegal_qp_transition",
        kind="errno",
        expected="EINVAL",
        source="rxe_qp.c rxe_qp_chk_attr (since 6.x __qp_chk_state): ib_modify_qp_is_ok (RESET "
        "→ RTS is not in its state table) fails → -EINVAL; ibv_modify_qp(3) lists the steps "
        "Reset → Init → RTR → RTS",
    ),
    Refusal(
        case="cq_overrun",
        kind="errno",
        expected="EOVERFLOW",
        source="our choice: the soft device's poll raises; ibv_poll_cq(3): a real CQ overrun "
        "raises the asynchronous event IBV_EVENT_CQ_ERR instead",
        follows="ours",
    ),
)
