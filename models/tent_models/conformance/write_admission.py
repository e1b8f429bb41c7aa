"""Write-admission conformance: ``ReceiverCreditAllocator`` against ``AdversarialCreditSpec``.

The adversarial spec lets every sender lie; what it says about the *receiver* is what the
allocator must do. :class:`WriteAdmissionLockstep` walks the spec and, for every step that
touches the receiver's books, makes the matching allocator call:

* ``grant(s)`` → ``grant`` of the demanded charge (all-or-nothing: ``min_grant = max_grant``);
* ``deliver`` of a usage report the receiver takes (live session, current epoch, newer sequence)
  → ``on_usage`` with its returned totals; the spec ignoring it as a violation ↔ the allocator
  raising :class:`RemoteProtocolError`;
* ``data_lands`` → a transfer opened in the :class:`~tent_credit.TransferBook` (its bound must
  allow it) and ``admit_write`` accepted; ``refuse_write`` → the transfer bound refusing (then
  ``quarantine``, as the transport does) or ``admit_write`` refused (with the reason the spec's
  books imply), and the key quarantined;
* ``consumer_release`` → ``release`` and every transfer of the epoch closed;
  ``reclaim_after_fence`` → ``fence_complete``;
  ``sender_restart`` → ``open_epoch``; ``receiver_restart`` → a new allocator.

Sender-side steps, message moves and network faults have no receiver counterpart. After every
step the books of every sender are compared with ``key_totals`` of every epoch (granted,
landed, released, reclaimed = by return + by fence, status ACTIVE/FENCING/FENCED ↔
ACTIVE/FENCING/RECLAIMED; a settled FENCED record is forgotten by the allocator), the books'
``held`` with the transfer book's, and the quarantine with ``is_quarantined``. A mismatch
raises :class:`WriteAdmissionDivergence`.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from typing import Any

from tent_spec.credit import (
    ACTIVE,
    FENCING,
    RECLAIMED,
    USAGE,
    CreditBounds,
    CreditState,
)
from tent_spec.credit_adversarial import AdversarialCreditSpec

from tent_credit import (
    AllocatorConfig,
    CreditResource,
    EpochState,
    GrantSplit,
    ReceiverCreditAllocator,
    SessionId,
    TransferBook,
    WriteRefusal,
)
from tent_credit.errors import InvalidEntry, RemoteProtocolError

__all__ = ["WriteAdmissionDivergence", "WriteAdmissionLockstep"]

RESOURCES = (CreditResource.DATA_BYTES, CreditResource.REQUEST_SLOTS, CreditResource.STAGING_SLOTS)
_LIFTED = 1 << 32
_STATUS = {ACTIVE: EpochState.ACTIVE, FENCING: EpochState.FENCING, RECLAIMED: EpochState.FENCED}


class WriteAdmissionDivergence(AssertionError):
    """The allocator's answer or books differ from the adversarial spec's."""


class WriteAdmissionLockstep:
    """One spec walk with the allocator alongside (see the module docstring)."""

    def __init__(self, bounds: CreditBounds) -> None:
        if bounds.resources > len(RESOURCES):
            raise ValueError(f"at most {len(RESOURCES)} resources")
        self.spec = AdversarialCreditSpec(bounds, name="write-admission-conformance")
        self.state: CreditState = self.spec.initial_states()[0]
        self._resources = RESOURCES[: bounds.resources]
        self.trace: list[tuple[str, tuple[Hashable, ...]]] = []
        self.bound_refusals = 0
        """Writes the transfer bound refused (before ``admit_write``)."""
        self._new_allocator()

    def _new_allocator(self) -> None:
        capacity = dict(zip(self._resources, self.spec.bounds.capacity, strict=True))
        self.allocator = ReceiverCreditAllocator(
            AllocatorConfig(
                capacity=capacity,
                control_slots=1,
                max_grant=dict.fromkeys(capacity, _LIFTED),
                min_grant=dict.fromkeys(capacity, _LIFTED),
                max_keys=len(self.state.peers),
                retry_after_us=1,
                grant_split=GrantSplit.FIRST_COME,
                max_fencing_epochs=self.spec.bounds.max_epoch,
            ),
            SessionId(self.state.session),
        )
        for s in range(len(self.state.peers)):
            self.allocator.open_epoch(s + 1, 0)
        self.book = TransferBook(self.allocator)

    def _vector(self, values: tuple[int, ...]) -> dict[CreditResource, int]:
        return dict(zip(self._resources, values, strict=True))

    def _fail(self, detail: str) -> WriteAdmissionDivergence:
        steps = " → ".join(f"{a}{args!r}" for a, args in self.trace)
        return WriteAdmissionDivergence(f"{detail}\n  after: {steps}")

    # ---- one step ------------------------------------------------------------------------

    def step(self, action: str, args: tuple[Hashable, ...]) -> None:
        before = self.state
        after = self.spec.apply(before, action, args)
        if after is None:
            raise ValueError(f"{action}{args!r} is not enabled")
        self.trace.append((action, args))
        handler = getattr(self, "_on_" + action, None)
        if handler is not None:
            handler(before, after, *args)
        self.state = after
        self.compare()

    def _on_grant(self, before: CreditState, _after: CreditState, s: int) -> None:
        books = before.peers[s].books[-1]
        charge = self._vector(self.spec.bounds.charges[books.demand - 1])
        decision = self.allocator.grant(s + 1, 0, charge)
        if dict(decision.granted_now) != {r: charge.get(r, 0) for r in self._resources}:
            raise self._fail(f"grant({s}) gave {dict(decision.granted_now)}, spec {charge}")

    def _on_deliver(self, before: CreditState, after: CreditState, s: int, msg: Any) -> None:
        if msg.kind != USAGE:
            return
        b = before.peers[s].books[-1]
        live = msg.session == before.session and msg.epoch == b.epoch and b.status == ACTIVE
        if not live or msg.seq <= b.usage_seq:
            return  # another session/epoch, or a duplicate/old sequence: never reaches it
        applied = after.peers[s].books[-1] != b
        try:
            self.allocator.on_usage(
                s + 1, 0, b.epoch, consumed_totals={}, returned_totals=self._vector(msg.returned)
            )
        except RemoteProtocolError:
            if applied:
                raise self._fail(f"on_usage refused a report the spec applied: {msg}") from None
            return
        if not applied and any(msg.returned[r] > b.reclaimed[r] for r in range(len(b.granted))):
            raise self._fail(f"on_usage applied a report the spec refused: {msg}")

    def _expected_refusal(self, before: CreditState, s: int, item: Any) -> WriteRefusal:
        peer = before.peers[s]
        if self.spec.quarantined(peer):
            return WriteRefusal.QUARANTINED
        books = [b for b in peer.books if b.epoch == item[1]]
        if not books or books[0].status == RECLAIMED:
            return WriteRefusal.FENCED_SESSION
        return WriteRefusal.OVER_CREDIT

    def _on_data_lands(self, _before: CreditState, _after: CreditState, s: int, item: Any) -> None:
        if not self.book.may_open(s + 1, 0, item[1]):
            raise self._fail(f"the transfer bound refused {item}; spec admits it")
        charge = self._vector(self.spec.bounds.charges[item[2]])
        admission = self.allocator.admit_write(s + 1, 0, item[1], charge)
        if not admission.accepted:
            raise self._fail(f"admit_write refused {item} ({admission.reason}); spec admits it")
        self.book.opened(s + 1, 0, item[1])

    def _on_refuse_write(self, before: CreditState, _after: CreditState, s: int, item: Any) -> None:
        if not self.book.may_open(s + 1, 0, item[1]):
            # the transport refuses before admit_write and quarantines the key itself
            # (CreditReceiver.quarantine): the allocator never hears of the write
            self.allocator.quarantine(s + 1, 0)
            self.bound_refusals += 1
            return
        charge = self._vector(self.spec.bounds.charges[item[2]])
        admission = self.allocator.admit_write(s + 1, 0, item[1], charge)
        expected = self._expected_refusal(before, s, item)
        if admission.accepted or admission.reason is not expected:
            raise self._fail(f"admit_write of {item}: {admission}, spec refuses ({expected})")

    def _on_consumer_release(
        self, before: CreditState, _after: CreditState, s: int, epoch: int
    ) -> None:
        books = next(b for b in before.peers[s].books if b.epoch == epoch)
        amounts = self._vector(
            tuple(a - r for a, r in zip(books.landed, books.released, strict=True))
        )
        self.allocator.release(s + 1, 0, epoch, amounts)
        for _ in range(self.book.held(s + 1, 0, epoch)):
            self.book.closed(s + 1, 0, epoch)

    def _on_reclaim_after_fence(
        self, _before: CreditState, _after: CreditState, s: int, epoch: int
    ) -> None:
        self.allocator.fence_complete(s + 1, 0, epoch)

    def _on_sender_restart(self, _before: CreditState, _after: CreditState, s: int) -> None:
        self.allocator.open_epoch(s + 1, 0)

    def _on_receiver_restart(self, _before: CreditState, _after: CreditState) -> None:
        self.state = _after  # the new session id comes from the spec
        self._new_allocator()

    # ---- the abstraction -----------------------------------------------------------------

    def compare(self) -> None:
        """Every sender's books equal the allocator's records (see the module docstring)."""
        state = self.state
        for s, peer in enumerate(state.peers):
            quarantined = self.spec.quarantined(peer)
            if self.allocator.is_quarantined(s + 1, 0) is not quarantined:
                raise self._fail(f"sender {s}: quarantine {not quarantined} in the allocator")
            if self.allocator.current_epoch(s + 1, 0) != peer.epoch:
                raise self._fail(f"sender {s}: allocator epoch differs from {peer.epoch}")
            for epoch in range(1, peer.epoch + 1):
                books = next((b for b in peer.books if b.epoch == epoch), None)
                try:
                    totals = self.allocator.key_totals(s + 1, 0, epoch)
                except InvalidEntry:
                    settled = books is None or (quarantined and books.landed == books.released)
                    if not settled:
                        detail = f"sender {s} epoch {epoch}: allocator forgot {books}"
                        raise self._fail(detail) from None
                    continue
                if books is None:
                    raise self._fail(f"sender {s} epoch {epoch}: allocator keeps {totals}")
                got = (
                    totals.state,
                    tuple(totals.granted[r] for r in self._resources),
                    tuple(totals.landed[r] for r in self._resources),
                    tuple(totals.released[r] for r in self._resources),
                    tuple(totals.reclaimed[r] for r in self._resources),
                )
                want = (
                    _STATUS[books.status],
                    books.granted,
                    books.landed,
                    books.released,
                    books.reclaimed,
                )
                if got != want:
                    raise self._fail(f"sender {s} epoch {epoch}: allocator {got}, spec {want}")
                held = self.book.held(s + 1, 0, epoch)
                if held != books.held:
                    detail = f"sender {s} epoch {epoch}: {held} transfers held, spec {books}"
                    raise self._fail(detail)

    # ---- a driver --------------------------------------------------------------------------

    def random_walk(self, rng: random.Random, depth: int) -> int:
        """Take up to ``depth`` random enabled steps (receiver steps twice as likely); returns
        the number taken."""
        taken = 0
        for _ in range(depth):
            steps = [(st.action, st.args) for st in self.spec.successors(self.state)]
            if not steps:
                break
            receiver = [st for st in steps if st[0] in _RECEIVER_STEPS]
            action, args = rng.choice(receiver if receiver and rng.random() < 0.5 else steps)
            self.step(action, args)
            taken += 1
        return taken


_RECEIVER_STEPS = frozenset(
    {"grant", "data_lands", "refuse_write", "consumer_release", "reclaim_after_fence"}
)
