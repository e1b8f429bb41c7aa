"""Hypothesis properties of SenderCreditLedger (docs/semantics.md#sender-ledger, RFC goal 4 and
claim 5).

1. Any delivery of a cumulative update stream (duplicated, reordered, stale) never makes
   available credit exceed the newest applied grant minus consumption, and ends exactly where
   applying only the highest-sequence delivered update ends.
2. ``try_reserve`` is atomic: a Blocked outcome changes nothing and names exactly the short
   resources; a token consumes exactly its charge.
3. ``rollback`` restores exactly; committed work stays consumed.
4. A stateful model comparison over every operation, including epoch fences.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    precondition,
    rule,
)

from tent_credit._ledger import (
    Blocked,
    ReservationToken,
    SenderCreditLedger,
    TokenState,
    UpdateDisposition,
)
from tent_credit._messages import ReceiverCreditUpdate
from tent_credit._types import CreditAmount, CreditCharge, CreditKey, CreditResource, SessionId
from tent_credit.errors import GrantDecreased, InsufficientCredit, InvalidEntry

R = tuple(CreditResource)
KEY = CreditKey(receiver_session=SessionId(77), sender_peer=1, qos_class=0)


def make_update(
    sequence: int, totals: dict[CreditResource, int], epoch: int = 1
) -> ReceiverCreditUpdate:
    return ReceiverCreditUpdate(
        qos_class=KEY.qos_class,
        receiver_session_id=KEY.receiver_session,
        epoch=epoch,
        sequence=sequence,
        grants=tuple(CreditAmount(resource=r, amount=a) for r, a in totals.items()),
    )


@st.composite
def cumulative_streams(draw: st.DrawFn) -> list[dict[CreditResource, int]]:
    """Full cumulative grant vectors for sequences 1..n, each total non-decreasing."""
    n = draw(st.integers(min_value=1, max_value=12))
    totals = dict.fromkeys(R, 0)
    stream = []
    for _ in range(n):
        for r in R:
            totals[r] += draw(st.integers(min_value=0, max_value=50))
        stream.append(dict(totals))
    return stream


charges = st.dictionaries(
    st.sampled_from(R), st.integers(min_value=1, max_value=60), min_size=1
).map(CreditCharge.of)


@given(stream=cumulative_streams(), data=st.data())
def test_any_delivery_order_never_exceeds_the_newest_grant(
    stream: list[dict[CreditResource, int]], data: st.DataObject
) -> None:
    ledger = SenderCreditLedger(max_entries=1)
    ledger.activate(KEY, 1)
    # a random multiset of sequence numbers (duplicates allowed), in a random order
    deliveries = data.draw(
        st.lists(st.integers(min_value=1, max_value=len(stream)), min_size=1, max_size=30)
    )
    consumed = dict.fromkeys(R, 0)
    newest = 0
    for seq in deliveries:
        disposition = ledger.apply_update(KEY, make_update(seq, stream[seq - 1]))
        if seq <= newest:
            assert disposition is UpdateDisposition.DUPLICATE_OR_OLD
        elif newest == 0 or seq == newest + 1:
            assert disposition is UpdateDisposition.APPLIED
        else:
            assert disposition is UpdateDisposition.SEQUENCE_GAP
        newest = max(newest, seq)
        # interleave consumption so "minus consumption" is not vacuous
        if data.draw(st.booleans()):
            result = ledger.try_reserve(KEY, data.draw(charges))
            if isinstance(result, ReservationToken):
                ledger.commit(result)
                for r, a in result.charge.parts:
                    consumed[r] += a
        available = ledger.available(KEY)
        for r in R:
            assert available[r] == stream[newest - 1][r] - consumed[r]
            assert available[r] >= 0
    e = ledger.entry(KEY)
    assert e.last_sequence == max(deliveries)
    # the same as a ledger that only ever saw the highest-sequence update
    only_max = SenderCreditLedger(max_entries=1)
    only_max.activate(KEY, 1)
    only_max.apply_update(KEY, make_update(max(deliveries), stream[max(deliveries) - 1]))
    assert e.grant_total == only_max.entry(KEY).grant_total


@given(
    grants=st.dictionaries(st.sampled_from(R), st.integers(min_value=0, max_value=100)),
    charge=charges,
)
def test_reserve_is_all_or_nothing(grants: dict[CreditResource, int], charge: CreditCharge) -> None:
    ledger = SenderCreditLedger(max_entries=1)
    ledger.activate(KEY, 1)
    ledger.apply_update(KEY, make_update(1, grants))
    before = ledger.entry(KEY)
    short = tuple(r for r, a in charge.parts if a > before.available[r])
    result = ledger.try_reserve(KEY, charge)
    after = ledger.entry(KEY)
    if short:
        assert result == Blocked(key=KEY, exhausted=short)
        assert after == before
    else:
        assert isinstance(result, ReservationToken)
        for r in R:
            assert after.consumed[r] == before.consumed[r] + charge.amount(r)
            assert after.grant_total[r] == before.grant_total[r]


@given(
    reserves=st.lists(
        st.tuples(charges, st.sampled_from(["commit", "rollback", "open"])), max_size=15
    ),
    data=st.data(),
)
def test_rollback_restores_exactly(
    reserves: list[tuple[CreditCharge, str]], data: st.DataObject
) -> None:
    ledger = SenderCreditLedger(max_entries=1)
    ledger.activate(KEY, 1)
    ledger.apply_update(KEY, make_update(1, dict.fromkeys(R, 10_000)))
    tokens = [
        (token, fate)
        for c, fate in reserves
        if isinstance(token := ledger.try_reserve(KEY, c), ReservationToken)
    ]
    # resolve in a random order
    order = data.draw(st.permutations(range(len(tokens))))
    expected = dict.fromkeys(R, 0)
    for i in order:
        token, fate = tokens[i]
        if fate == "commit":
            ledger.commit(token)
        elif fate == "rollback":
            ledger.rollback(token)
        if fate != "rollback":
            for r, a in token.charge.parts:
                expected[r] += a
    assert dict(ledger.entry(KEY).consumed) == expected


# -- stateful comparison against a dictionary model ----------------------------------------------

EPOCHS = st.integers(min_value=1, max_value=3)
small_charges = st.dictionaries(
    st.sampled_from(R), st.integers(min_value=1, max_value=10), min_size=1
).map(CreditCharge.of)


@dataclass
class ModelEntry:
    epoch: int
    last: int = 0
    grant: dict[CreditResource, int] = field(default_factory=lambda: dict.fromkeys(R, 0))
    consumed: dict[CreditResource, int] = field(default_factory=lambda: dict.fromkeys(R, 0))
    returned: dict[CreditResource, int] = field(default_factory=lambda: dict.fromkeys(R, 0))
    generation: int = 0  # bumps whenever the entry is replaced: the fence


@dataclass
class ModelToken:
    generation: int
    charge: CreditCharge
    state: TokenState = TokenState.RESERVED


class LedgerMachine(RuleBasedStateMachine):
    """One key; the model is a few dicts. Every outcome and every field must agree."""

    tokens = Bundle("tokens")

    def __init__(self) -> None:
        super().__init__()
        self.ledger = SenderCreditLedger(max_entries=1)
        self.model: ModelEntry | None = None
        self.generation = 0
        self.model_tokens: dict[int, ModelToken] = {}

    @rule(epoch=EPOCHS)
    def activate(self, epoch: int) -> None:
        m = self.model
        if m is not None and epoch < m.epoch:
            with pytest.raises(InvalidEntry):
                self.ledger.activate(KEY, epoch)
            return
        self.ledger.activate(KEY, epoch)
        if m is None or epoch > m.epoch:
            self.generation += 1
            self.model = ModelEntry(epoch=epoch, generation=self.generation)

    @rule(epoch=EPOCHS)
    def deactivate(self, epoch: int) -> None:
        m = self.model
        if m is not None and m.epoch != epoch:
            with pytest.raises(InvalidEntry):
                self.ledger.deactivate(KEY, epoch)
            return
        self.ledger.deactivate(KEY, epoch)
        self.model = None

    @rule(
        epoch=EPOCHS,
        sequence=st.integers(min_value=1, max_value=8),
        raise_by=st.dictionaries(st.sampled_from(R), st.integers(min_value=-3, max_value=60)),
    )
    def apply_update(self, epoch: int, sequence: int, raise_by: dict[CreditResource, int]) -> None:
        m = self.model
        base = m.grant if m is not None else dict.fromkeys(R, 0)
        totals = {r: max(0, base[r] + d) for r, d in raise_by.items()}
        upd = make_update(sequence, totals, epoch)
        if m is None or m.epoch != epoch:
            with pytest.raises(InvalidEntry):
                self.ledger.apply_update(KEY, upd)
            return
        if sequence <= m.last:
            assert self.ledger.apply_update(KEY, upd) is UpdateDisposition.DUPLICATE_OR_OLD
            return
        if any(totals[r] < m.grant[r] for r in totals):
            with pytest.raises(GrantDecreased):
                self.ledger.apply_update(KEY, upd)
            return
        event("update applied")
        gap = m.last != 0 and sequence != m.last + 1
        expected = UpdateDisposition.SEQUENCE_GAP if gap else UpdateDisposition.APPLIED
        assert self.ledger.apply_update(KEY, upd) is expected
        m.grant.update(totals)
        m.last = sequence

    def _available(self, r: CreditResource) -> int:
        m = self.model
        assert m is not None
        return m.grant[r] - m.consumed[r] - m.returned[r]

    @rule(target=tokens, charge=small_charges)
    def reserve(self, charge: CreditCharge) -> object:
        m = self.model
        if m is None or m.last == 0:
            with pytest.raises(InvalidEntry):
                self.ledger.try_reserve(KEY, charge)
            return multiple()
        short = tuple(r for r, a in charge.parts if a > self._available(r))
        result = self.ledger.try_reserve(KEY, charge)
        event(f"reserve blocked={bool(short)}")
        if short:
            assert result == Blocked(key=KEY, exhausted=short)
            return multiple()
        assert isinstance(result, ReservationToken)
        for r, a in charge.parts:
            m.consumed[r] += a
        self.model_tokens[result.token_id] = ModelToken(m.generation, charge)
        return result

    @rule(token=tokens, commit=st.booleans())
    def resolve(self, token: ReservationToken, commit: bool) -> None:
        # tokens stay in the bundle, so a second commit/rollback of one token is drawn too
        mt = self.model_tokens[token.token_id]
        m = self.model
        live = m is not None and m.generation == mt.generation
        operation = self.ledger.commit if commit else self.ledger.rollback
        event(f"resolve live={live} state={mt.state.name}")
        if not live or mt.state is not TokenState.RESERVED:
            with pytest.raises(InvalidEntry):
                operation(token)
            return
        assert m is not None
        operation(token)
        if commit:
            mt.state = TokenState.COMMITTED
        else:
            mt.state = TokenState.ROLLED_BACK
            for r, a in mt.charge.parts:
                m.consumed[r] -= a
        assert token.state is mt.state

    @rule(charge=small_charges)
    def return_credit(self, charge: CreditCharge) -> None:
        m = self.model
        if m is None or m.last == 0:
            with pytest.raises(InvalidEntry):
                self.ledger.return_credit(KEY, charge)
            return
        short = tuple(r for r, a in charge.parts if a > self._available(r))
        if short:
            with pytest.raises(InsufficientCredit):
                self.ledger.return_credit(KEY, charge)
            return
        self.ledger.return_credit(KEY, charge)
        for r, a in charge.parts:
            m.returned[r] += a

    @precondition(lambda self: self.model is not None)
    @invariant()
    def entry_matches_model(self) -> None:
        m = self.model
        assert m is not None
        e = self.ledger.entry(KEY)
        assert (e.epoch, e.last_sequence, e.has_update) == (m.epoch, m.last, m.last != 0)
        assert dict(e.grant_total) == m.grant
        assert dict(e.consumed) == m.consumed
        assert dict(e.returned) == m.returned
        for r in R:
            # the safety invariant: consumed + returned never exceeds the grant
            assert e.available[r] == self._available(r) >= 0

    @invariant()
    def keys_match_model(self) -> None:
        assert self.ledger.keys() == (() if self.model is None else (KEY,))


LedgerMachine.TestCase.settings = settings(stateful_step_count=40)
TestLedgerAgainstModel = LedgerMachine.TestCase
