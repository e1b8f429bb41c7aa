"""What a real RC QP refuses, and how: one table for the soft device's tests and a real NIC's run.

Each :class:`Refusal` names a case, whether the refusal is a **completion** status (the verbs
call succeeded and the initiator's work completion carries the error) or an **errno** (the verbs
call itself raised ``PyverbsRDMAError`` with that ``error_code``), and where the expectation comes
from: rdma-core's own ``tests/`` where they exercise the case, else the libibverbs man page.
``tests/transport/verbs/test_soft_refusals.py`` runs every case against the soft device and
``test_real_device.py`` runs the ``real`` ones against a NIC when the probe finds one.
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
    """One refused case: ``expected`` is an ``IBV_WC_*`` name (completion) or an errno name."""

    case: str
    kind: Literal["completion", "errno"]
    expected: str
    source: str
    real: bool = True
    """False only for the soft device's choice where real hardware reports it another way."""

    def value(self, enums: Any) -> int:
        """The expected number: from the backend's ``enums`` (completion) or :mod:`errno`."""
        if self.kind == "completion":
            return int(getattr(enums, self.expected))
        return int(getattr(errno, self.expected))


def _table(*rows: Refusal) -> Mapping[str, Refusal]:
    table = {row.case: row for row in rows}
    assert len(table) == len(rows), "duplicate refusal case"
    return MappingProxyType(table)


REFUSALS: Mapping[str, Refusal] = _table(
    Refusal(
        case="write_without_remote_write_access",
        kind="completion",
        expected="IBV_WC_REM_ACCESS_ERR",
        source="rdma-core tests/test_mr.py::test_mr_rereg_access_bad_flow",
    ),
    Refusal(
        case="write_after_deregistration",
        kind="completion",
        expected="IBV_WC_REM_ACCESS_ERR",
        source="rdma-core tests/test_mr.py::test_mw_type2_invalidate_dealloc; ibv_dereg_mr(3)",
    ),
    Refusal(
        case="write_with_unknown_rkey",
        kind="completion",
        expected="IBV_WC_REM_ACCESS_ERR",
        source="rdma-core tests/test_qpex.py (RDMA write with a never-bound MW rkey)",
    ),
    Refusal(
        case="write_out_of_range",
        kind="completion",
        expected="IBV_WC_REM_ACCESS_ERR",
        source="ibv_poll_cq(3) IBV_WC_REM_ACCESS_ERR: out of the region's bounds",
    ),
    Refusal(
        case="read_without_remote_read_access",
        kind="completion",
        expected="IBV_WC_REM_ACCESS_ERR",
        source="rdma-core tests/test_mr.py::test_mr_rereg_access_bad_flow (READ analogue)",
    ),
    Refusal(
        case="local_sge_outside_mr",
        kind="completion",
        expected="IBV_WC_LOC_PROT_ERR",
        source="ibv_poll_cq(3) IBV_WC_LOC_PROT_ERR: the SGE is not in a valid MR",
    ),
    Refusal(
        case="write_imm_without_receive",
        kind="completion",
        expected="IBV_WC_RNR_RETRY_EXC_ERR",
        source="ibv_poll_cq(3) IBV_WC_RNR_RETRY_EXC_ERR; tests/utils.py wc_status_to_str (13)",
    ),
    Refusal(
        case="outstanding_wr_at_err",
        kind="completion",
        expected="IBV_WC_WR_FLUSH_ERR",
        source="ibv_modify_qp(3) / ibv_poll_cq(3) IBV_WC_WR_FLUSH_ERR",
    ),
    Refusal(
        case="target_qp_not_ready",
        kind="completion",
        expected="IBV_WC_RETRY_EXC_ERR",
        source="ibv_poll_cq(3) IBV_WC_RETRY_EXC_ERR: the responder never answers",
    ),
    Refusal(
        case="post_send_in_reset",
        kind="errno",
        expected="EINVAL",
        source="rdma-core tests/utils.py::post_sq_state_bad_flow",
    ),
    Refusal(
        case="post_send_before_rts",
        kind="errno",
        expected="EINVAL",
        source="rdma-core tests/utils.py::post_sq_state_bad_flow (INIT/RTR); ibv_post_send(3)",
    ),
    Refusal(
        case="post_recv_in_reset",
        kind="errno",
        expected="EINVAL",
        source="rdma-core tests/utils.py::post_rq_state_bad_flow",
    ),
    Refusal(
        case="send_queue_full",
        kind="errno",
        expected="ENOMEM",
        source="rdma-core tests/utils.py::full_rq_bad_flow (the send-queue analogue)",
    ),
    Refusal(
        case="recv_queue_full",
        kind="errno",
        expected="ENOMEM",
        source="rdma-core tests/utils.py::full_rq_bad_flow",
    ),
    Refusal(
        case="recv_too_many_sges",
        kind="errno",
        expected="EINVAL",
        source="rdma-core tests/utils.py::create_rq_with_larger_sgl_bad_flow",
    ),
    Refusal(
        case="reg_mr_remote_write_without_local_write",
        kind="errno",
        expected="EINVAL",
        source="rdma-core tests/test_mr.py::test_reg_mr_bad_flags; ibv_reg_mr(3)",
    ),
    Refusal(
        case="create_cq_above_max_cqe",
        kind="errno",
        expected="EINVAL",
        source="rdma-core tests/test_cq.py::test_create_cq_bad_flow",
    ),
    Refusal(
        case="illegal_qp_transition",
        kind="errno",
        expected="EINVAL",
        source="ibv_modify_qp(3): RESET -> RTS is not a legal transition",
    ),
    Refusal(
        case="cq_overrun",
        kind="errno",
        expected="EOVERFLOW",
        source="soft device: poll raises; real HW raises IBV_EVENT_CQ_ERR (async) and errors QPs",
        real=False,
    ),
)
