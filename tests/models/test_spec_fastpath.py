"""The credit spec's memoised fast path equals direct evaluation of its guards and effects.

``CreditSpec.successors`` memoises each sender's steps, ``_failed_checks`` memoises per-sender
invariant verdicts and ``canonicalize``/``pack`` memoise per sender (class docstring,
"Memoisation"). The reference here is the readable definition: every candidate of
``_instances`` whose guard holds, with its effect; every per-sender invariant body evaluated
for every sender; ``_renumber``/``_pack_peer`` applied to each sender. They must agree on every
reachable state of the tiny and known-bad configurations and on a seeded random sample of the
``ci`` configuration.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest
from tent_models.configs import CREDIT_BOUNDS, KNOWN_BAD_BOUNDS
from tent_spec.credit import CreditSpec, CreditState, _pack_peer, _renumber
from tent_spec.variants import KNOWN_BAD

_SEED = 20261130


def reference_successors(spec: CreditSpec, state: CreditState) -> list[tuple[Any, ...]]:
    return [
        (action, args, spec._effect[action](state, *args))
        for action, args in spec._instances(state)
        if spec._guard[action](state, *args) is None
    ]


def reference_failed_checks(spec: CreditSpec, state: CreditState) -> frozenset[str]:
    senders = range(len(state.peers))
    return frozenset(
        name
        for name, body in spec._sender_checks.items()
        if not all(body(state, s) for s in senders)
    )


def reference_canonical(state: CreditState) -> CreditState:
    peers = sorted(_renumber(p, state.session) for p in state.peers)
    return CreditState(state.session, tuple(peers), state.faults)


def assert_fast_path_agrees(spec: CreditSpec, state: CreditState) -> list[Any]:
    """Compare every memoised result on ``state``; return its successors."""
    steps = list(spec.successors(state))
    assert [(st.action, st.args, st.state) for st in steps] == reference_successors(spec, state)
    assert spec._failed_checks(state) == reference_failed_checks(spec, state)
    assert spec.free_capacity(state) == tuple(
        c - sum(b.granted[r] - b.released[r] - b.reclaimed[r] for p in state.peers for b in p.books)
        for r, c in enumerate(spec.bounds.capacity)
    )
    canonical = spec.canonicalize(state)
    assert canonical == reference_canonical(state)
    assert spec.pack(canonical) == (
        canonical.session,
        tuple(canonical.faults),
        tuple(_pack_peer(p) for p in canonical.peers),
    )
    return steps


def reachable(spec: CreditSpec) -> Iterator[CreditState]:
    """Every reachable canonical state within bounds (BFS over the memoised successors)."""
    start = [spec.canonicalize(s) for s in spec.initial_states()]
    seen = set(start)
    queue = deque(start)
    while queue:
        state = queue.popleft()
        yield state
        if not spec.within_bounds(state):
            continue
        for step in spec.successors(state):
            nxt = spec.canonicalize(step.state)
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)


def test_memoised_credit_tiny_graph_equals_direct_evaluation() -> None:
    spec = CreditSpec(CREDIT_BOUNDS["tiny"], name="credit/tiny")
    count = 0
    for state in reachable(spec):
        assert_fast_path_agrees(spec, state)
        count += 1
    assert count == 3566  # the manifest count of credit/tiny


@pytest.mark.parametrize("variant", sorted(KNOWN_BAD))
def test_memoised_known_bad_variants_equal_direct_evaluation(variant: str) -> None:
    spec = KNOWN_BAD[variant][0](KNOWN_BAD_BOUNDS[variant], name=variant)
    for index, state in enumerate(reachable(spec)):
        assert_fast_path_agrees(spec, state)
        if index >= 3000:
            break


def test_memoised_credit_ci_random_walks_equal_direct_evaluation() -> None:
    spec = CreditSpec(CREDIT_BOUNDS["ci"], name="credit/ci")
    rng = random.Random(_SEED)
    visited = 0
    for _walk in range(60):
        state = spec.canonicalize(spec.initial_states()[0])
        for _depth in range(40):
            steps = assert_fast_path_agrees(spec, state)
            visited += 1
            if not steps or not spec.within_bounds(state):
                break
            # Also non-canonical states: the memo keys must not assume canonical input.
            state = rng.choice(steps).state
            if rng.random() < 0.5:
                state = spec.canonicalize(state)
    assert visited > 1000


def test_an_effect_touching_another_sender_is_refused_by_the_memo() -> None:
    class Meddling(CreditSpec):
        def _e_push_update(self, state: CreditState, s: int) -> CreditState:
            nxt = super()._e_push_update(state, s)
            other = nxt.peers[1 - s]._replace(epoch=nxt.peers[1 - s].epoch + 1)
            return self._with_peer(nxt, 1 - s, other)

    spec = Meddling(CREDIT_BOUNDS["ci"], name="meddling")
    state = spec.initial_states()[0]
    with pytest.raises(AssertionError, match="not local to sender"):
        list(spec.successors(state))
