"""What the gated spec's hand-driven tests share (``test_gated_spec.py``,
``test_gated_grant_ahead.py``): a step that must be enabled, the one message of a bag, and a
small configuration of one key with two 1-byte owners that each test finishes with its own
capacity and grants."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from tent_spec.gated import GatedConfig, GatedSpec, GatedState, OwnerSpec


def step(spec: GatedSpec, state: GatedState, action: str, *args: Hashable) -> GatedState:
    """``action(*args)`` from ``state``; fails with the spec's reason if it is not enabled."""
    nxt = spec.apply(state, action, args)
    assert nxt is not None, spec.explain(state, action, args)
    return nxt  # type: ignore[no-any-return]


def only_message(bag: tuple[tuple[Any, int], ...]) -> Any:
    """The single message (counted once) of a channel's bag."""
    assert len(bag) == 1 and bag[0][1] == 1, bag
    return bag[0][0]


def small_config(**fields: Any) -> GatedConfig:
    """``gated/test``: one key, two remote owners of one byte each, both in flight at most,
    four messages per channel; ``fields`` add the rest (capacity, grants) or replace these."""
    defaults: dict[str, Any] = {
        "name": "gated/test",
        "keys": 1,
        "workload": (OwnerSpec(1, 1), OwnerSpec(1, 1)),
        "max_outstanding_owners": 2,
        "max_outstanding_bytes": 2,
        "windows": ((2, 2),),
        "max_messages": 4,
    }
    return GatedConfig(**{**defaults, **fields})
