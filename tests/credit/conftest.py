"""Fixtures shared by the credit tests."""

from __future__ import annotations

import pytest

from tent_credit import ReceiverCreditAllocator


@pytest.fixture
def capacity_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    """A receiver allocator whose free capacity ignores what it committed: the fault that the
    tests of issue 10 item 20 plant to show a run would notice. Every read of free capacity
    (``free_for``, ``user_free``, the demand-driven grant and the grant-ahead top-ups) goes
    through ``_class_free``, so that is where it lies."""
    monkeypatch.setattr(
        ReceiverCreditAllocator,
        "_class_free",
        lambda self, c: dict.fromkeys(self.config.capacity, 1 << 40),
    )
