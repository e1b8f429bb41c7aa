"""The dispatch pass: refill the dispatch window from the queue, hand owners to the rails, post.

Run on every submit and every ``progress`` pass: ``_refill`` picks over the free dispatch window
(``pick_for_dispatch`` with the rails' transmit estimate as bandwidth and the gate, through
``_eligibility``, as eligibility), hands each picked owner to the rails (``_hand_off``: cut into
slices, each assigned a rail) and ends the owners the pick dropped or rejected (then calls the
drop hooks); ``_dispatch`` then fails the transfers whose unposted token went stale and posts
every rail. A mixin of :class:`DispatchCore` over :mod:`._completion` (it ends transfers and
hands the rails the slice callbacks); a hot path, so it stays flat, with no helper layer.
"""

from __future__ import annotations

from tent_credit import GateRejected, RejectReason
from tent_credit import errors as credit_errors
from tent_sched import EligibilityDecision, OwnerView, TaskStatus
from tent_sched import errors as sched_errors

from ._completion import _CoreCompletion
from ._records import REJECT_DETAIL, TransferRecord, translate
from ._types import EndReason, TransferPhase


class _CorePass(_CoreCompletion):
    """The dispatch pass of a :class:`DispatchCore` (module docstring)."""

    def _dispatch(self, now_ns: int) -> None:
        if self._queue is not None and self._queued:
            self._refill(now_ns)
        for record in self._settle.stale():  # their slices carry a lease the receiver refuses
            record.failed = True
            record.reason = EndReason.REJECTED
            record.detail = REJECT_DETAIL[RejectReason.SNAPSHOT_FENCED]
            self._withdraw(record)
            self._maybe_finish(record, now_ns)
        self._rails.post_all(now_ns, self._posted, self._slice_ended)

    def _eligibility(self, owner: OwnerView, now_ns: int, /) -> EligibilityDecision:
        assert self._gate is not None
        decision = self._gate(owner, now_ns)
        if isinstance(decision, GateRejected):
            self._reject_reason[owner.owner_id] = decision.reason
        return decision

    def _refill(self, now_ns: int) -> None:
        """Pick over the free dispatch window and hand the picked owners to the rails."""
        assert self._queue is not None
        window = self._config.sched.runtime_queue
        owners_left = window.max_dispatch_owners - self._window_owners
        bytes_left = window.max_dispatch_bytes - self._window_bytes
        if owners_left <= 0 or bytes_left <= 0:
            return
        gate = self._gate if self._credit_active else None  # DISABLED: no gate at all
        quiet, self._quiet = self._quiet, None
        if quiet is not None and gate is not None and (quiet[1] is None or now_ns < quiet[1]):
            stamp = gate.quiet_stamp()
            if stamp is not None and quiet[0] == self._quiet_key(stamp[0], quiet[2]):
                # nothing the last (empty) pick read has changed and the clock cannot have
                # changed its answers yet: this one would decide every owner the same way
                self._quiet = quiet
                self._quiet_skips += 1
                return
        try:
            result = self._queue.pick_for_dispatch(
                owners_left,
                bytes_left,
                now_ns=now_ns,
                bandwidth_bps=self._rails.estimated_bandwidth_bps(),
                eligibility=None if gate is None else self._eligibility,
            )
        except (sched_errors.SchedError, credit_errors.CreditError) as exc:
            if gate is not None:  # the pick changed nothing; give back its own tokens
                gate.rollback_unsettled(keep=self._settle.pending_tokens())
            self._reject_reason.clear()
            raise translate(exc) from exc
        if gate is not None:
            gate.observe_pick(result, self._queue.owner, now_ns)
        for picked in result.picked:
            record = self._by_owner[picked.owner.owner_id]
            self._queued -= 1
            record.in_window = True
            self._window_owners += 1
            self._window_bytes += record.request.length
            self._hand_off(record, picked.token)
        dropped: list[tuple[int, float]] = []
        for owner_id in result.dropped:
            record = self._by_owner[owner_id]
            self._queued -= 1
            mlu = self._drop_mlu.pop(owner_id, 0.0)
            record.dropped_mlu = mlu
            dropped.append((record.transfer_id, mlu))
            detail = f"deadline-infeasible drop: predicted MLU {mlu:.3f}"
            self._end(record, TaskStatus.CANCELED, EndReason.DROPPED, detail, now_ns)
        for owner_id in result.rejected:
            record = self._by_owner[owner_id]
            self._queued -= 1
            reason = self._reject_reason.pop(owner_id, None)
            detail = "rejected" if reason is None else REJECT_DETAIL[reason]
            self._end(record, TaskStatus.FAILED, EndReason.REJECTED, detail, now_ns)
        self._reject_reason.clear()
        if (
            gate is not None
            and self._queued  # none left: only a submit refills, and it changes the key
            and not (result.dropped or result.rejected)
            and not self._queue.pick_reads_clock()
        ):
            # Every owner the pick visited and left queued was answered "blocked", and it
            # stopped short only at the window's budget, which the key holds: the same inputs
            # give the same answers again. When it visited every queued owner, the window did
            # not stop it, and between refills the window only frees (only a pick fills it):
            # the key leaves it out, so a completion alone does not repeat the pick.
            stamp = gate.quiet_stamp()
            if stamp is not None:
                stopped_by_window = len(result.blocked) != self._queued
                key = self._quiet_key(stamp[0], stopped_by_window)
                self._quiet = (key, stamp[1], stopped_by_window)
        if dropped and self._hooks:  # after the pick is settled, so a hook may call back in
            hooks = tuple(self._hooks.values())
            for transfer_id, mlu in dropped:
                for hook in hooks:
                    hook(transfer_id, mlu)

    def _quiet_key(self, gate_stamp: tuple[object, ...], with_window: bool) -> tuple[object, ...]:
        # what a pick reads besides the gate: the queue (every submit, every owner that left)
        # and, when it stopped the pick, the free dispatch window
        if not with_window:
            return (self._submitted, self._queued, gate_stamp)
        return (
            self._submitted,
            self._queued,
            self._window_owners,
            self._window_bytes,
            gate_stamp,
        )

    def _hand_off(self, record: TransferRecord, token: object | None) -> None:
        """Cut a dispatched transfer into slices and assign each a rail; its gate token waits
        for the first post (``_settle.py``)."""
        record.phase = TransferPhase.DISPATCHED
        record.token = token
        self._dispatched += 1
        for item in self._ids.cut(record, token, self._config.dispatch.slice_bytes):
            item.rail = self._rails.choose(item.request.length)
            record.waiting.add(item)
            self._rails.enqueue(item)
        self._settle.handed_off(record)
