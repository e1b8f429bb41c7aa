"""The receiver allocator's write admission and quarantine (docs/abuse.md).

:class:`_WriteAdmission` is the part of :class:`~tent_credit.ReceiverCreditAllocator` that
enforces what a sender may *do*, not what it claims: a credited write lands only within the
credit its epoch still holds (:meth:`~_WriteAdmission.admit_write`), and a refusal quarantines
the key for the rest of the session (RFC rule 4: no grant, no new epoch, every epoch fenced and
reclaimed at once). The decision's values and the parsing of a write's peer-controlled charge
are :mod:`._admission`; the decision is here because it reads and commits the epoch records.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._admission import ACCEPTED, WriteAdmission, WriteRefusal, is_u64, parse_write_amounts, refused
from ._allocator_config import EpochState, _frozen
from ._allocator_state import _AllocatorState
from ._arith import U32_MAX
from ._epoch_record import _check_qos, _check_sender, _Event, _next_state
from ._types import CreditResource


class _WriteAdmission(_AllocatorState):
    """Write admission and quarantine of :class:`~tent_credit.ReceiverCreditAllocator` (see the
    module docstring)."""

    def admit_write(
        self, sender_peer: object, qos_class: object, epoch: object, amounts: object
    ) -> WriteAdmission:
        """Decide, before its bytes touch memory, whether a credited write may land.

        Accepted (and counted as landed, in place of :meth:`data_landed`) exactly when the key
        is known and not quarantined, the epoch is ACTIVE or FENCING (in-flight data of a fenced
        connection may still land until :meth:`fence_complete`), and the charge fits the credit
        the sender still holds of that epoch: ``landed + reclaimed_by_return + amount ≤ granted``
        per resource. A sender's *claims* (its usage reports) can only lower what it holds, never
        what the receiver physically stores: so physical occupancy (landed − released, summed) never
        exceeds capacity, whatever a sender reports.

        Refused, in this order: MALFORMED (ids or amounts not well-formed, see
        :func:`~tent_credit._admission.parse_write_amounts`), UNKNOWN_EPOCH (a key or epoch never
        opened in this session), QUARANTINED, FENCED_SESSION (fence completed, or settled and
        forgotten), OVER_CREDIT. Every refusal counts a protocol violation; a refusal of a known
        key also quarantines that key (RFC rule 4, :meth:`quarantine`). An unknown key is not
        remembered (a peer must not grow the receiver's state by inventing keys).

        Never raises: every argument may carry peer-controlled values. An honest sender, whose
        writes are covered by credit it neither consumed elsewhere nor returned, is never refused.
        """
        reason = self._admission_refusal(sender_peer, qos_class, epoch, amounts)
        if reason is None:
            self._writes_admitted += 1
            return ACCEPTED
        self._writes_refused += 1
        self._protocol_violations += 1
        if is_u64(sender_peer) and type(qos_class) is int and 0 <= qos_class <= U32_MAX:
            key = (sender_peer, qos_class)
            if key in self._keys and key not in self._quarantined:
                self.quarantine(*key)
        return refused(reason)

    def _admission_refusal(
        self, sender_peer: object, qos_class: object, epoch: object, amounts: object
    ) -> WriteRefusal | None:
        if not is_u64(sender_peer) or type(qos_class) is not int or not 0 <= qos_class <= U32_MAX:
            return WriteRefusal.MALFORMED
        if not is_u64(epoch) or epoch == 0:
            return WriteRefusal.MALFORMED
        charge = parse_write_amounts(amounts, self._resources)
        if charge is None:
            return WriteRefusal.MALFORMED
        key = (sender_peer, qos_class)
        state = self._keys.get(key)
        if state is None or epoch > state.current_epoch:
            return WriteRefusal.UNKNOWN_EPOCH
        if key in self._quarantined:
            return WriteRefusal.QUARANTINED
        ident = (sender_peer, qos_class, epoch)
        record = self._records.get(ident)
        if record is None or record.state is EpochState.FENCED:
            return WriteRefusal.FENCED_SESSION
        landed = dict(record.landed)
        for r, amount in charge.items():
            landed[r] += amount
        granted, back = record.granted, record.reclaimed_by_return
        for r in self._resources:  # a loop, not any() over a generator: asked per write
            if landed[r] + back[r] > granted[r]:
                return WriteRefusal.OVER_CREDIT
        # Within the grant, so within u64 and within capacity: the commit cannot refuse.
        self._commit(
            ident,
            record.replace(state=_next_state(record, _Event.LAND), landed=landed),
        )
        return None

    @property
    def quarantined_keys(self) -> int:
        """How many keys this session has quarantined (they stay so until the session ends)."""
        return len(self._quarantined)

    def is_quarantined(self, sender_peer: int, qos_class: int) -> bool:
        """Whether the key is quarantined (IA on malformed ids; an unknown key is not)."""
        return (_check_sender(sender_peer), _check_qos(qos_class)) in self._quarantined

    def quarantine(self, sender_peer: int, qos_class: int) -> Mapping[CreditResource, int]:
        """Quarantine a key for the rest of the session (RFC rule 4: fail/quarantine the peer).

        From now on the key gets no grant and no new epoch (:class:`KeyQuarantined`) and every
        write of any of its epochs is refused (QUARANTINED). Because nothing of it can land any
        more, every epoch it holds is fenced *and* its fence completed at once: everything that
        never landed is reclaimed (returned, per resource) for other keys; what already landed
        stays committed until :meth:`release`. Its usage reports reclaim nothing further (its
        epochs are FENCED). Idempotent. Raises IA (malformed ids), IE (unknown key); a failure
        changes nothing.
        """
        self._key(sender_peer, qos_class)
        key = (sender_peer, qos_class)
        self._quarantined.add(key)
        self._live_demand.pop(key, None)
        reclaimed = dict.fromkeys(self._resources, 0)
        for ident in [i for i in self._records if i[:2] == key]:
            record = self._records[ident]
            if record.state is EpochState.ACTIVE:
                record = record.replace(state=_next_state(record, _Event.FENCE))
            if record.state is EpochState.FENCING:
                reclaim = {
                    r: record.granted[r] - record.landed[r] - record.reclaimed_by_return[r]
                    for r in self._resources
                }
                record = record.replace(
                    state=_next_state(record, _Event.COMPLETE_FENCE),
                    reclaimed_by_fence=reclaim,
                )
                for r, amount in reclaim.items():
                    reclaimed[r] += amount
                    self._reclaimed_by_fence[r] += amount
            self._commit(ident, record)  # lowers outstanding only: cannot refuse
        return _frozen(reclaimed)
