"""Ledger-level conformance: ``SenderCreditLedger`` + ``ControlInbox`` vs the spec's ledger rules.

The endpoint lockstep (test_credit_conformance.py) drives whole endpoints, so some ledger rules
are never reached through it. Here the ledger itself is compared, step by step, with the
ledger rules of :class:`tent_spec.credit.CreditSpec`: ``_apply_update`` and
``_apply_activation`` for control messages, and the guards and effects of ``reserve``,
``commit``, ``rollback`` and ``return_unused`` on a :class:`CreditState` holding one spec
:class:`Peer` per ledger key. After every step the abstraction of each implementation entry
must equal the spec ledger's fields.

The abstraction (implementation → spec):

1. Key ``_KEYS[k]`` (receiver session ``k + 1``) ↔ spec peer ``k``, whose ledger ``session`` is
   ``k + 1`` once activated and 0 while the key has no entry (the spec's "no entry").
2. ``LedgerEntrySnapshot.epoch`` / ``last_sequence`` ↔ ``Ledger.epoch`` / ``last_seq``.
3. Resources ↔ vector indices: ``CreditResource`` member ``r`` ↔ index ``r - 1``
   (DATA_BYTES 0, REQUEST_SLOTS 1, STAGING_SLOTS 2, CONSUMER_SLOTS 3), for ``grant_total``,
   ``consumed`` and ``returned``. An update carries all four totals, as the spec's ``Update``
   carries a full vector.
4. Reservation tokens ↔ charge indices: ``CHARGES[c]`` ↔ the ``CreditCharge`` of
   :func:`_charge`; the spec's ``Ledger.tokens`` is the sorted multiset of the charge indices of
   the implementation's RESERVED tokens of the key's current entry.
5. Refusals: where the spec leaves the ledger unchanged the implementation either returns
   ``DUPLICATE_OR_OLD`` or raises the typed error of the reason (``InvalidArgument`` for a
   malformed update, ``InvalidEntry`` for no entry / another epoch / a fenced or used token,
   ``GrantDecreased`` for a decreasing total, ``Blocked`` / ``InsufficientCredit`` for lack of
   credit), and then changes nothing.

Bursts through the inbox are modelled as the spec delivers messages: in arrival order, one at a
time; the inbox's coalescing must not change the outcome (a superseded update is a no-op in the
spec). Two assumptions make that comparison exact, both true of a conforming receiver:

1. Per ``(key, epoch)`` the receiver publishes strictly increasing sequences with
   non-decreasing totals (``_Publisher``); a burst offers publications and re-sends of them
   (duplicates, reordering).
2. An epoch's updates are published only after its activation was sent, and the control stream
   delivers the activation first: a burst never offers an update of an epoch above the key's
   current one (its epoch is ``current - back``; an item whose epoch would be below 1 is not
   sent). Activations in a burst take effect on arrival; updates wait in the inbox until the
   burst is drained, so an activation lands between offer and drain.

The last section is a white-box test of rollback's defensive underflow check, which no public
call sequence reaches (a RESERVED token's charge is always inside ``consumed``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

import attrs
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from tent_spec.credit import (
    ACTIVATION,
    UPDATE,
    Activation,
    CreditBounds,
    CreditSpec,
    CreditState,
    Faults,
    Ledger,
    Peer,
    Update,
)

from tent_credit import (
    Blocked,
    ControlInbox,
    CreditAmount,
    CreditCharge,
    CreditKey,
    CreditResource,
    InboxOutcome,
    LedgerEntrySnapshot,
    ReceiverCreditUpdate,
    ReservationToken,
    SenderCreditLedger,
    SessionId,
    TokenState,
    UpdateDisposition,
)
from tent_credit.errors import (
    ArithmeticOverflow,
    CreditError,
    GrantDecreased,
    InsufficientCredit,
    InvalidArgument,
    InvalidEntry,
)

T = TypeVar("T")
Vec = tuple[int, ...]

# Abstraction 3: spec vector index i <-> the resource whose wire value is i + 1.
RESOURCES: tuple[CreditResource, ...] = tuple(sorted(CreditResource))
assert [int(r) for r in RESOURCES] == [i + 1 for i in range(len(RESOURCES))]
ZERO: Vec = (0,) * len(RESOURCES)

# Abstraction 4: the charge vectors (spec indices) a reservation or a return can carry.
CHARGES: tuple[Vec, ...] = (
    (1, 0, 0, 0),
    (0, 1, 0, 0),
    (2, 0, 1, 0),
    (0, 0, 0, 3),
    (1, 1, 1, 1),
    (4, 0, 0, 0),
)

# Abstraction 1: key k <-> spec peer k, ledger session k + 1.
_KEYS: tuple[CreditKey, ...] = tuple(
    CreditKey(receiver_session=SessionId(k + 1), sender_peer=7, qos_class=3) for k in range(2)
)
MAX_EPOCH = 4

# Only the ledger rules of the spec are used: the receiver-side bounds are irrelevant, and
# ``max_tokens`` is far above any run so that model bound never disables a reservation.
SPEC = CreditSpec(
    CreditBounds(
        senders=len(_KEYS),
        capacity=(1 << 20,) * len(RESOURCES),
        charges=CHARGES,
        max_grant_total=1 << 20,
        max_tokens=1 << 20,
        max_epoch=MAX_EPOCH,
        max_messages=1,
    ),
    name="ledger-conformance",
)


def _charge(c: int) -> CreditCharge:
    return CreditCharge.of({RESOURCES[i]: a for i, a in enumerate(CHARGES[c]) if a})


def _vector(values: Mapping[CreditResource, int]) -> Vec:
    """Abstraction 3: a per-resource mapping as a spec vector."""
    return tuple(values[r] for r in RESOURCES)


def _update(key: CreditKey, session: SessionId, msg: Update) -> ReceiverCreditUpdate:
    """The implementation's message for the spec ``Update`` ``msg`` (all four totals)."""
    return ReceiverCreditUpdate(
        qos_class=key.qos_class,
        receiver_session_id=session,
        epoch=msg.epoch,
        sequence=msg.seq,
        grants=tuple(
            CreditAmount(resource=r, amount=g) for r, g in zip(RESOURCES, msg.grants, strict=True)
        ),
    )


def _outcome(call: Callable[[], T]) -> T | CreditError:
    """Run ``call``; a typed error of the package is an outcome like any value."""
    try:
        return call()
    except CreditError as exc:
        return exc


def _abstract(snapshot: LedgerEntrySnapshot) -> tuple[int, int, Vec, Vec, Vec]:
    """Abstractions 2-3 of an implementation entry."""
    return (
        snapshot.epoch,
        snapshot.last_sequence,
        _vector(snapshot.grant_total),
        _vector(snapshot.consumed),
        _vector(snapshot.returned),
    )


def _spec_fields(led: Ledger) -> tuple[int, int, Vec, Vec, Vec]:
    return (led.epoch, led.last_seq, led.grant_total, led.consumed, led.returned)


def expected_update_outcome(
    led: Ledger, msg: Update, key_session: int
) -> type[CreditError] | UpdateDisposition:
    """How the implementation reports the spec's ``_apply_update(led, msg)`` (abstraction 5).

    The implementation validates the message before it looks at the entry, so a malformed
    message (epoch or sequence 0, or another session than the key's) is InvalidArgument first.
    """
    if msg.epoch == 0 or msg.seq == 0 or msg.session != key_session:
        return InvalidArgument
    if led.session == 0 or msg.epoch != led.epoch:
        return InvalidEntry
    if not SPEC._accepts_sequence(led, msg.seq):
        return UpdateDisposition.DUPLICATE_OR_OLD
    if not SPEC._accepts_totals(led, msg.grants):
        return GrantDecreased
    if led.last_seq != 0 and msg.seq != led.last_seq + 1:
        return UpdateDisposition.SEQUENCE_GAP
    return UpdateDisposition.APPLIED


@attrs.define
class _Publisher:
    """A conforming receiver's publications for one (key, epoch): (sequence, totals) pairs
    with strictly increasing sequences and non-decreasing totals (assumption 1)."""

    history: list[tuple[int, Vec]] = attrs.field(factory=list)

    def publish(self, led: Ledger, epoch: int, seq_bump: int, bumps: Vec) -> tuple[int, Vec]:
        last_seq, last_grants = self.history[-1] if self.history else (0, ZERO)
        if led.epoch == epoch:
            # Publish above what the ledger holds, so that the burst has something to apply.
            last_seq = max(last_seq, led.last_seq)
            last_grants = tuple(map(max, last_grants, led.grant_total))
        published = (
            last_seq + 1 + seq_bump,
            tuple(g + b for g, b in zip(last_grants, bumps, strict=True)),
        )
        self.history.append(published)
        return published


@attrs.define
class _TrackedToken:
    """An implementation token with what the model knows of it."""

    token: ReservationToken
    k: int
    c: int
    generation: int
    state: TokenState


@attrs.frozen
class _Activate:
    k: int
    epoch: int


@attrs.frozen
class _Offer:
    k: int
    back: int  # epoch = the key's current epoch - back (never a future epoch: assumption 2)
    resend: int | None  # re-send an earlier publication of that epoch, else publish a new one
    seq_bump: int
    bumps: Vec


_keys = st.integers(0, len(_KEYS) - 1)
_bumps = st.tuples(*(st.integers(0, 3) for _ in RESOURCES))
_burst_item = st.one_of(
    st.builds(_Activate, k=_keys, epoch=st.integers(1, MAX_EPOCH)),
    st.builds(
        _Offer,
        k=_keys,
        back=st.integers(0, 2),
        resend=st.none() | st.integers(0, 7),
        seq_bump=st.integers(0, 2),
        bumps=_bumps,
    ),
)


class LedgerConformance(RuleBasedStateMachine):
    """SenderCreditLedger and ControlInbox in lockstep with the spec's ledger rules."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger = SenderCreditLedger(max_entries=len(_KEYS))
        self.inbox: ControlInbox[CreditKey] = ControlInbox(max_keys=len(_KEYS))
        no_entry = Peer(SPEC._fresh_ledger(0, 0), 0, (), (), (), ())
        self.spec = CreditState(1, (no_entry,) * len(_KEYS), Faults(0, 0, 0, 0, 0, 0))
        # Bumped whenever the spec starts a fresh ledger for the key (the epoch fence).
        self.generation = [0] * len(_KEYS)
        self.tokens: list[_TrackedToken] = []
        self.publishers: dict[tuple[int, int], _Publisher] = {}

    # -- spec side ------------------------------------------------------------------------

    def led(self, k: int) -> Ledger:
        return self.spec.peers[k].ledger

    def set_led(self, k: int, led: Ledger) -> None:
        peer = self.spec.peers[k]._replace(ledger=led)
        self.spec = CreditState(
            self.spec.session,
            (*self.spec.peers[:k], peer, *self.spec.peers[k + 1 :]),
            self.spec.faults,
        )

    def spec_activate(self, k: int, epoch: int) -> bool:
        """Apply the spec's activation rule; True if it started a fresh ledger."""
        led = self.led(k)
        after = SPEC._apply_activation(led, Activation(ACTIVATION, k + 1, epoch))
        self.set_led(k, after)
        if after is led:
            return False
        self.generation[k] += 1
        return True

    # -- implementation side --------------------------------------------------------------

    def activate_both(self, k: int, epoch: int) -> None:
        key, led = _KEYS[k], self.led(k)
        outcome = _outcome(lambda: self.ledger.activate(key, epoch))
        fresh = self.spec_activate(k, epoch)
        if led.session and epoch < led.epoch:
            # docs/semantics.md#sender-ledger activate 3: a stale activation is refused (the spec
            # ignores it).
            assert isinstance(outcome, InvalidEntry), outcome
            assert not fresh
        else:
            # Rule 2 (new key), 4 (same epoch: no-op, consumption kept), 5 (higher: fence).
            assert outcome is None, outcome
            assert fresh == (not led.session or epoch > led.epoch)

    # -- rules ----------------------------------------------------------------------------

    @rule(k=_keys, epoch=st.integers(1, MAX_EPOCH))
    def activate(self, k: int, epoch: int) -> None:
        self.activate_both(k, epoch)

    @rule(
        k=_keys,
        session_k=_keys,
        epoch=st.integers(0, MAX_EPOCH),
        seq=st.integers(0, 8),
        grants=st.tuples(*(st.integers(0, 12) for _ in RESOURCES)),
    )
    def apply_update(self, k: int, session_k: int, epoch: int, seq: int, grants: Vec) -> None:
        """A direct update, of any session, epoch and sequence, with arbitrary totals."""
        key, led = _KEYS[k], self.led(k)
        msg = Update(UPDATE, session_k + 1, epoch, seq, grants)
        expected = expected_update_outcome(led, msg, k + 1)
        outcome = _outcome(
            lambda: self.ledger.apply_update(
                key, _update(key, _KEYS[session_k].receiver_session, msg)
            )
        )
        after = SPEC._apply_update(led, msg)
        self.set_led(k, after)
        if isinstance(expected, UpdateDisposition):
            assert outcome is expected, (outcome, expected)
        else:
            assert type(outcome) is expected, (outcome, expected)
        assert (after != led) == (expected in _APPLIED), (after, led, expected)

    @rule(items=st.lists(_burst_item, min_size=1, max_size=6))
    def burst(self, items: list[_Activate | _Offer]) -> None:
        """Offer a burst through the inbox (activations act on arrival), then drain it."""
        for item in items:
            if isinstance(item, _Activate):
                self.activate_both(item.k, item.epoch)
                continue
            key, led = _KEYS[item.k], self.led(item.k)
            epoch = led.epoch - item.back
            if epoch < 1:
                continue  # assumption 2: no update of an epoch that was never activated
            publisher = self.publishers.setdefault((item.k, epoch), _Publisher())
            if item.resend is not None and publisher.history:
                seq, grants = publisher.history[item.resend % len(publisher.history)]
            else:
                seq, grants = publisher.publish(led, epoch, item.seq_bump, item.bumps)
            msg = Update(UPDATE, item.k + 1, epoch, seq, grants)
            offered = self.inbox.offer(key, _update(key, key.receiver_session, msg))
            assert offered is not InboxOutcome.REJECTED_FULL, offered
            # The spec delivers it now; the implementation applies it (or a newer one) at drain.
            self.set_led(item.k, SPEC._apply_update(led, msg))
        for key, update in self.inbox.drain():
            outcome = _outcome(lambda: self.ledger.apply_update(key, update))  # noqa: B023
            assert isinstance(outcome, UpdateDisposition | InvalidEntry | GrantDecreased), outcome
        assert len(self.inbox) == 0

    @rule(k=_keys, c=st.integers(0, len(CHARGES) - 1))
    def reserve(self, k: int, c: int) -> None:
        key, led = _KEYS[k], self.led(k)
        outcome = _outcome(lambda: self.ledger.try_reserve(key, _charge(c)))
        guard = SPEC._g_reserve(self.spec, k, c)
        if guard is None:
            assert isinstance(outcome, ReservationToken), (outcome, guard)
            self.spec = SPEC._e_reserve(self.spec, k, c)
            self.tokens.append(
                _TrackedToken(
                    token=outcome,
                    k=k,
                    c=c,
                    generation=self.generation[k],
                    state=TokenState.RESERVED,
                )
            )
        elif not led.session or not led.last_seq:
            assert isinstance(outcome, InvalidEntry), (outcome, guard)
        else:
            # RFC atomic eligibility: Blocked names every short resource, reserves nothing.
            available = SPEC.available(led)
            short = tuple(
                r for r, a, have in zip(RESOURCES, CHARGES[c], available, strict=True) if a > have
            )
            assert outcome == Blocked(key=key, exhausted=short), (outcome, guard)

    def _finish(self, pick: int, event: str, next_state: TokenState) -> None:
        tracked = self.tokens[pick % len(self.tokens)]
        call = self.ledger.commit if event == "commit" else self.ledger.rollback
        outcome = _outcome(lambda: call(tracked.token))
        if tracked.generation != self.generation[tracked.k]:
            # Fenced: the spec's old tokens died with the old entry; the implementation says IE.
            assert isinstance(outcome, InvalidEntry), outcome
            return
        if tracked.state is not TokenState.RESERVED:
            assert isinstance(outcome, InvalidEntry), outcome  # each step happens once
            return
        assert SPEC._g_commit(self.spec, tracked.k, tracked.c) is None
        assert outcome is None, outcome
        effect = SPEC._e_commit if event == "commit" else SPEC._e_rollback
        self.spec = effect(self.spec, tracked.k, tracked.c)
        tracked.state = next_state

    @precondition(lambda self: bool(self.tokens))
    @rule(pick=st.integers(0, 1 << 16))
    def commit(self, pick: int) -> None:
        self._finish(pick, "commit", TokenState.COMMITTED)

    @precondition(lambda self: bool(self.tokens))
    @rule(pick=st.integers(0, 1 << 16))
    def rollback(self, pick: int) -> None:
        self._finish(pick, "rollback", TokenState.ROLLED_BACK)

    @rule(k=_keys, c=st.integers(0, len(CHARGES) - 1))
    def return_credit(self, k: int, c: int) -> None:
        key, led = _KEYS[k], self.led(k)
        outcome = _outcome(lambda: self.ledger.return_credit(key, _charge(c)))
        guard = SPEC._g_return_unused(self.spec, k, c)
        if guard is None:
            assert outcome is None, (outcome, guard)
            self.spec = SPEC._e_return_unused(self.spec, k, c)
        elif not led.session or not led.last_seq:
            assert isinstance(outcome, InvalidEntry), (outcome, guard)
        else:
            available = SPEC.available(led)
            short = tuple(
                r for r, a, have in zip(RESOURCES, CHARGES[c], available, strict=True) if a > have
            )
            assert isinstance(outcome, InsufficientCredit), (outcome, guard)
            assert outcome.exhausted == short

    # -- the abstraction ------------------------------------------------------------------

    @invariant()
    def entries_match_the_spec_ledgers(self) -> None:
        live = {_KEYS[k] for k in range(len(_KEYS)) if self.led(k).session}
        assert set(self.ledger.keys()) == live
        for k, key in enumerate(_KEYS):
            led = self.led(k)
            if not led.session:
                continue
            assert _abstract(self.ledger.entry(key)) == _spec_fields(led), (key, led)

    @invariant()
    def reserved_tokens_match_the_spec_tokens(self) -> None:
        for k in range(len(_KEYS)):
            mine = sorted(
                t.c
                for t in self.tokens
                if t.k == k
                and t.generation == self.generation[k]
                and t.state is TokenState.RESERVED
            )
            assert tuple(mine) == self.led(k).tokens
            for t in self.tokens:
                if t.k == k and t.generation == self.generation[k]:
                    assert t.token.state is t.state


_APPLIED = (UpdateDisposition.APPLIED, UpdateDisposition.SEQUENCE_GAP)

LedgerConformance.TestCase.settings = settings(stateful_step_count=30)
TestLedgerConformsToSpecLedgerRules = LedgerConformance.TestCase


# -- pinned scenarios ---------------------------------------------------------------------


def test_burst_straddling_an_epoch_change_applies_the_new_epochs_update() -> None:
    """[update e1 s5, activate e2, update e2 s1]: the e2 update supersedes
    (docs/semantics.md#receiver-allocator)."""
    machine = LedgerConformance()
    machine.activate(0, 1)
    machine.burst(
        [
            _Offer(k=0, back=0, resend=None, seq_bump=4, bumps=(5, 1, 0, 0)),
            _Activate(k=0, epoch=2),
            _Offer(k=0, back=0, resend=None, seq_bump=0, bumps=(2, 0, 0, 1)),
        ]
    )
    machine.entries_match_the_spec_ledgers()
    snapshot = machine.ledger.entry(_KEYS[0])
    assert (snapshot.epoch, snapshot.last_sequence) == (2, 1)
    assert _vector(snapshot.grant_total) == (2, 0, 0, 1)


def test_same_epoch_activation_keeps_consumption_and_tokens() -> None:
    machine = LedgerConformance()
    machine.activate(0, 2)
    machine.apply_update(0, 0, 2, 1, (5, 5, 5, 5))
    machine.reserve(0, 4)
    machine.activate(0, 2)
    machine.entries_match_the_spec_ledgers()
    machine.reserved_tokens_match_the_spec_tokens()
    assert _vector(machine.ledger.entry(_KEYS[0]).consumed) == (1, 1, 1, 1)
    machine.rollback(0)
    assert _vector(machine.ledger.entry(_KEYS[0]).consumed) == ZERO


def test_update_of_another_epoch_is_invalid_entry_and_changes_nothing() -> None:
    machine = LedgerConformance()
    machine.activate(1, 3)
    machine.apply_update(1, 1, 3, 1, (1, 0, 0, 0))
    before = machine.ledger.entry(_KEYS[1])
    machine.apply_update(1, 1, 2, 2, (9, 9, 9, 9))  # asserts InvalidEntry inside
    machine.apply_update(1, 1, 4, 2, (9, 9, 9, 9))
    assert machine.ledger.entry(_KEYS[1]) == before


# -- white box: rollback's defensive underflow check --------------------------------------


def test_rollback_underflow_raises_arithmetic_overflow_and_changes_nothing() -> None:
    """WHITE BOX, deliberately reaching into the private ``_Entry``.

    docs/semantics.md#sender-ledger makes rollback's subtraction checked although no public call
    sequence can underflow it (a RESERVED token's charge is always inside ``consumed``). To prove
    the check exists and is atomic, the test corrupts the entry's ``consumed`` below the live
    token's charge in one resource only, then requires ArithmeticOverflow with the entry and the
    token exactly as they were (the untouched resource must not have been written either).
    """
    key = _KEYS[0]
    ledger = SenderCreditLedger(max_entries=1)
    ledger.activate(key, 1)
    ledger.apply_update(
        key, _update(key, key.receiver_session, Update(UPDATE, 1, 1, 1, (10, 10, 0, 0)))
    )
    token = ledger.try_reserve(
        key, CreditCharge.of({CreditResource.DATA_BYTES: 4, CreditResource.REQUEST_SLOTS: 3})
    )
    assert isinstance(token, ReservationToken)
    entry = ledger._entries[key]  # deliberate: the private _Entry
    entry.consumed[CreditResource.REQUEST_SLOTS] = 1  # below the token's charge of 3
    before = ledger.entry(key)
    with pytest.raises(ArithmeticOverflow):
        ledger.rollback(token)
    assert ledger.entry(key) == before
    assert _vector(before.consumed) == (4, 1, 0, 0)
    assert token.state is TokenState.RESERVED
