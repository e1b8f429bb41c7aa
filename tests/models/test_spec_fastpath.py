"""The credit spec's memoised fast path equals direct evaluation of its guards and effects.

``CreditSpec.successors`` memoises each sender's steps, ``_failed_checks`` memoises per-sender
invariant verdicts and ``canonicalize``/``pack`` memoise per sender (class docstring,
"Memoisation"); the checker's hot loop uses ``fingerprinted_successors``, ``fingerprint`` and
``invariants_hold``. The reference here is the readable definition: every candidate of
``_instances`` whose guard holds, with its effect; every invariant of ``invariants()``; the
bounds restated; ``_renumber``/``_pack_peer`` applied to each sender; the fingerprint's formula
restated from per-component blake2b digests. They must agree on every reachable state of the
tiny and known-bad configurations and on a seeded random sample of the ``ci`` configuration.
"""

from __future__ import annotations

import marshal
import random
from collections import deque
from collections.abc import Iterator
from hashlib import blake2b
from typing import Any

import pytest
from tent_models.configs import ADVERSARIAL_BOUNDS, CREDIT_BOUNDS, KNOWN_BAD_BOUNDS
from tent_spec.credit import (
    CreditSpec,
    CreditState,
    ReadableCreditSpec,
    _in_flight_messages,
    _pack_peer,
    _renumber,
)
from tent_spec.credit_adversarial import AdversarialCreditSpec
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


def digest64(value: tuple[Any, ...]) -> int:
    return int.from_bytes(blake2b(marshal.dumps(value, 2), digest_size=8).digest(), "little")


def reference_fingerprint(state: CreditState) -> int:
    """(h(session, faults) + Σ_s h(s, pack(peers[s]))) mod 2**64, from scratch."""
    total = digest64((state.session, tuple(state.faults)))
    total += sum(digest64((s, _pack_peer(p))) for s, p in enumerate(state.peers))
    return total % 2**64


def reference_within_bounds(spec: CreditSpec, state: CreditState) -> bool:
    cap = spec.bounds.seq_cap
    if _in_flight_messages(state) > spec.bounds.max_messages:
        return False
    return all(
        p.ledger.last_seq <= cap
        and p.ledger.usage_seq <= cap
        and all(b.pushed_seq <= cap and b.usage_seq <= cap for b in p.books)
        for p in state.peers
    )


def assert_fast_path_agrees(spec: CreditSpec, state: CreditState) -> list[Any]:
    """Compare every memoised result on ``state``; return its successors."""
    steps = list(spec.successors(state))
    assert [(st.action, st.args, st.state) for st in steps] == reference_successors(spec, state)
    fused = list(spec.fingerprinted_successors(state))
    expected = [
        (st.action, st.args, reference_canonical(st.state), reference_fingerprint(st.state))
        for st in steps
    ]
    # the fingerprint of a successor is taken on its canonical form
    expected = [(a, args, c, reference_fingerprint(c)) for a, args, c, _ in expected]
    assert fused == expected
    assert spec.fingerprint(state) == reference_fingerprint(state)
    assert spec.invariants_hold(state) == all(inv.holds(state) for inv in spec.invariants())
    assert spec.within_bounds(state) == reference_within_bounds(spec, state)
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
    assert_overrides_agree(spec, state)
    return steps


def assert_overrides_agree(spec: CreditSpec, state: CreditState) -> None:
    """Every method the fast path overrides equals the readable spec's own definition, called
    on the same instance (so a variant's guards and effects are the ones compared)."""
    readable = ReadableCreditSpec
    assert [tuple(st) for st in spec.successors(state)] == [
        tuple(st) for st in readable.successors(spec, state)
    ]
    assert spec.free_capacity(state) == readable.free_capacity(spec, state)
    assert spec._room(state) == readable._room(spec, state)
    assert spec.within_bounds(state) == readable.within_bounds(spec, state)
    assert spec.canonicalize(state) == readable.canonicalize(spec, state)
    assert spec.pack(state) == readable.pack(spec, state)
    for name in spec._sender_checks:
        assert spec._every_sender(state, name) == readable._every_sender(spec, state, name)


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
    fingerprints: dict[int, tuple[Any, ...]] = {}
    for state in reachable(spec):
        assert_fast_path_agrees(spec, state)
        # one fingerprint per packed state and vice versa on the whole graph
        assert fingerprints.setdefault(spec.fingerprint(state), spec.pack(state)) == spec.pack(
            state
        )
        count += 1
    assert count == 3566  # the manifest count of credit/tiny
    assert len(fingerprints) == count


def test_the_readable_spec_alone_checks_to_the_same_result() -> None:
    """``ReadableCreditSpec`` (nothing memoised) is a complete model: the checker finds the
    fast spec's states, transitions, depth, coverage and witnesses on credit/tiny."""
    import attrs
    from tent_models.checker import check

    def comparable(result: Any) -> Any:
        return attrs.evolve(result, seconds=0.0, states_per_second=0.0, bytes_per_state=0.0)

    fast = check(CreditSpec(CREDIT_BOUNDS["tiny"], name="credit/tiny"))
    readable = check(ReadableCreditSpec(CREDIT_BOUNDS["tiny"], name="credit/tiny"))
    assert fast.distinct_states == 3566  # the manifest count of credit/tiny
    assert comparable(readable) == comparable(fast)


def test_fingerprint_is_a_pinned_value_independent_of_memo_state() -> None:
    """The same value in a fresh spec, after a walk, and as a pinned number (a changed
    encoding or a salted hash would change it; the number is the restated formula's)."""
    fresh = CreditSpec(CREDIT_BOUNDS["ci"], name="credit/ci")
    initial = fresh.canonicalize(fresh.initial_states()[0])
    walked = CreditSpec(CREDIT_BOUNDS["ci"], name="credit/ci")
    state = walked.canonicalize(walked.initial_states()[0])
    for _ in range(5):
        state = next(iter(walked.fingerprinted_successors(state)))[2]
    copy = pickle_roundtrip(initial)
    assert walked.fingerprint(copy) == fresh.fingerprint(initial) == reference_fingerprint(initial)
    # re-pinned when Ledger gained the stale_tokens history field (issue 10, item 16), and
    # when Books gained held (issue 27 item 1: transfers held, 0 in the honest spec)
    assert fresh.fingerprint(initial) == 0xBC4398277DD1B4B9


def pickle_roundtrip(state: CreditState) -> CreditState:
    import pickle

    copy: CreditState = pickle.loads(pickle.dumps(state))
    assert copy == state and copy.peers[0] is not state.peers[0]
    return copy


def test_fused_successors_of_an_unpickled_or_permuted_state_equal_the_plain_path() -> None:
    """States that are not the spec's own interned objects (a worker's unpickled copy, a
    permuted slot order) must give exactly ``canonicalize`` + ``fingerprint`` of ``successors``."""
    spec = CreditSpec(CREDIT_BOUNDS["ci"], name="credit/ci")
    rng = random.Random(_SEED + 1)
    state = spec.canonicalize(spec.initial_states()[0])
    checked = 0
    for _ in range(200):
        steps = list(spec.fingerprinted_successors(state))
        if not steps:
            break
        state = rng.choice(steps)[2]
        for variant in (
            pickle_roundtrip(state),
            state._replace(peers=tuple(reversed(state.peers))),
        ):
            expected = [
                (st.action, st.args, spec.canonicalize(st.state), 0)
                for st in spec.successors(variant)
            ]
            expected = [(a, args, c, reference_fingerprint(c)) for a, args, c, _ in expected]
            assert list(spec.fingerprinted_successors(variant)) == expected
            checked += 1
    assert checked > 100


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
    with pytest.raises(AssertionError, match="not local to sender"):
        list(spec.fingerprinted_successors(spec.canonicalize(state)))


def test_interleaved_expansions_across_memo_clears_equal_direct_evaluation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The canonical-step memo names peers by ``id``: with tables of 5 entries, cleared at
    every entry point, two expansions advanced in turns (one clears what the other was
    using) must still give exactly ``canonicalize`` + ``fingerprint`` of ``successors``."""
    from tent_spec.credit import _fastpath

    monkeypatch.setattr(_fastpath, "_CACHE_LIMIT", 5)
    spec = CreditSpec(CREDIT_BOUNDS["tiny"], name="credit/tiny")
    states = list(reachable(CreditSpec(CREDIT_BOUNDS["tiny"], name="credit/tiny")))
    rng = random.Random(_SEED + 2)
    compared = 0
    for _ in range(300):
        # fresh copies: once the tables forget them they are freed and their ids reused
        pair = [spec.canonicalize(pickle_roundtrip(rng.choice(states))) for _ in range(2)]
        streams = [spec.fingerprinted_successors(state) for state in pair]
        got: list[list[Any]] = [[], []]
        live = [0, 1]
        while live:
            for k in list(live):
                item = next(streams[k], None)
                if item is None:
                    live.remove(k)
                else:
                    got[k].append(item)
        for state, items in zip(pair, got, strict=True):
            steps = reference_successors(spec, state)
            canonical = [(a, args, reference_canonical(nxt)) for a, args, nxt in steps]
            expected = [(a, args, c, reference_fingerprint(c)) for a, args, c in canonical]
            assert items == expected
            compared += len(items)
    assert len(spec._interned) <= 5
    assert compared > 1000


@pytest.mark.parametrize("senders", [1, 3])
def test_fast_path_with_one_or_three_senders_equals_direct_evaluation(senders: int) -> None:
    """The fused expansion has a two-sender shortcut; other sender counts take the general
    branch, which must agree too."""
    import attrs

    spec = CreditSpec(attrs.evolve(CREDIT_BOUNDS["ci"], senders=senders), name="credit/n")
    rng = random.Random(_SEED + senders)
    visited = 0
    for _walk in range(15):
        state = spec.canonicalize(spec.initial_states()[0])
        for _depth in range(25):
            steps = assert_fast_path_agrees(spec, state)
            visited += 1
            if not steps or not spec.within_bounds(state):
                break
            state = spec.canonicalize(rng.choice(steps).state)
    assert visited > 150


def test_memoised_adversarial_tiny_graph_equals_direct_evaluation() -> None:
    # The adversarial spec's new actions run through the same sender memo and fused path.
    spec = AdversarialCreditSpec(ADVERSARIAL_BOUNDS["tiny"], name="adversarial/tiny")
    count = 0
    actions: set[str] = set()
    for state in reachable(spec):
        actions.update(step.action for step in assert_fast_path_agrees(spec, state))
        count += 1
    assert count == 1591  # the manifest count of adversarial/tiny
    assert {"lie_return", "forge_write", "refuse_write"} <= actions


def test_memoised_adversarial_ci_random_walks_equal_direct_evaluation() -> None:
    spec = AdversarialCreditSpec(ADVERSARIAL_BOUNDS["ci"], name="adversarial/ci")
    rng = random.Random(_SEED)
    visited = 0
    for _walk in range(30):
        state = spec.canonicalize(spec.initial_states()[0])
        for _depth in range(40):
            steps = assert_fast_path_agrees(spec, state)
            visited += 1
            if not steps or not spec.within_bounds(state):
                break
            state = rng.choice(steps).state
            if rng.random() < 0.5:
                state = spec.canonicalize(state)
    assert visited > 500


def test_the_canonical_step_memo_holds_only_shared_objects() -> None:
    """What keeps the memo at ≈ 10 B per state on credit/ci (docs/benchmarks.md): after a check
    every Peer and Faults a canonical-step entry names is the interned one, every instance is
    the shared one, and the raw-step memo (for ``successors``) was never filled."""
    from tent_models.checker import check

    spec = CreditSpec(CREDIT_BOUNDS["tiny"], name="credit/tiny")
    assert check(spec).distinct_states == 3566
    assert spec._canon_steps and not spec._steps_cache
    instances = {id(inst) for inst in spec._instance_table.values()}
    named = 0
    for flat, parts in spec._canon_steps.values():
        assert len(parts) == 2 * (len(flat) // 3)
        for instance, peer, faults in zip(flat[0::3], flat[1::3], flat[2::3], strict=True):
            assert id(instance) in instances
            assert spec._interned[peer] is peer
            assert spec._faults_interned[faults] is faults
            named += 1
    assert named > 3566
