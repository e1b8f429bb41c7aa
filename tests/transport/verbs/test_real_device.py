"""The refusal table and the verbs Device on a real NIC: runs where the probe finds a device.

Elsewhere every test here skips with the probe's reason (the only skip the suite allows). On a
machine with a NIC, ``TENT_RDMA_DEVICE`` picks the device (default: the first one listed).
"""

from __future__ import annotations

import os

import pytest
from tent_transport.verbs import load_pyverbs, probe
from tent_transport.verbs.refusals import REFUSALS
from verbs_rc import SCENARIOS

_PROBE = probe()
pytestmark = pytest.mark.skipif(not _PROBE.found, reason=_PROBE.reason)


def _device() -> str:
    return os.environ.get("TENT_RDMA_DEVICE", _PROBE.devices[0] if _PROBE.devices else "")


@pytest.mark.parametrize("case", sorted(c for c, r in REFUSALS.items() if r.real))
def test_real_device_refuses_as_the_table_says(case: str) -> None:
    backend = load_pyverbs()
    observed, target_changed = SCENARIOS[case](backend, _device())
    assert observed == REFUSALS[case].value(backend.enums), REFUSALS[case].source
    assert not target_changed
