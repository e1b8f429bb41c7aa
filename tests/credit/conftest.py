"""Fixtures shared by the credit tests."""

from __future__ import annotations

import pytest

from tent_credit import ReceiverCreditAllocator


@pytest.fixture
def capacity_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    """A receiver allocator whose free capacity ignores what it committed: the fault that the
    tests of issue 10 item 20 plant to show a run would notice. Both reads of free capacity
    lie: ``free_for`` (the demand-driven grant) and ``user_free`` (the grant-ahead top-ups)."""
    monkeypatch.setattr(ReceiverCreditAllocator, "free_for", lambda self, r, c: 1 << 40)
    monkeypatch.setattr(
        ReceiverCreditAllocator,
        "user_free",
        lambda self: dict.fromkeys(self.config.capacity, 1 << 40),
    )
