"""Every refusal of the table, against the soft device: the status or errno rdma-core expects."""

from __future__ import annotations

from pathlib import Path

import pytest
from tent_transport.devices.verbs import soft_backend
from tent_transport.devices.verbs.refusals import REFUSALS
from verbs_rc import SCENARIOS

REMOTE_CASES = {
    "write_without_remote_write_access",
    "write_after_deregistration",
    "write_with_unknown_rkey",
    "write_out_of_range",
    "write_imm_without_receive",
    "target_qp_not_ready",
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_soft_device_refuses_like_rdma_core(case: str, fabric: Path) -> None:
    backend = soft_backend(fabric)
    refusal = REFUSALS[case]
    observed, target_changed = SCENARIOS[case](backend, "soft0")
    assert observed == refusal.value(backend.enums), (case, refusal.source)
    # a refused remote operation writes nothing into the target
    assert not target_changed
    if case in REMOTE_CASES:
        assert refusal.kind == "completion"


def test_table_names_real_constants() -> None:
    backend = soft_backend()
    for refusal in REFUSALS.values():
        assert refusal.value(backend.enums) >= 0
        assert refusal.source
