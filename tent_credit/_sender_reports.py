"""What the sender endpoint tells the receiver, and when: :meth:`messages_to_send`.

The offer until an activation answers it, the usage report (version 1: paced by the usage
interval, at once for a sender that starts wanting; version 2: the level report of
:mod:`._levels`, only with news), version 1's heartbeat, the repeat count of the statistics, and
:meth:`get_timer`, the next time any of them is due. A mixin of
:class:`~tent_credit._sender_endpoint.SenderEndpoint` over :mod:`._sender_state`, apart from the
reservation path: it decides what goes on the wire, never what may be dispatched.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._arith import U64_MAX
from ._endpoint_common import _amounts, _nonzero_amounts
from ._messages import CapabilityOffer, Heartbeat, SenderCreditUsage
from ._negotiation import NegotiationState
from ._sender_state import _SenderState
from ._trace import message_fields
from ._types import CreditCharge, CreditResource
from ._wire import encode


class _SenderReports(_SenderState):
    """The outbound messages of a :class:`SenderEndpoint` (module docstring)."""

    # ---------------------------------------------------------------- output

    def messages_to_send(self, now_ns: int) -> list[bytes]:
        """Encoded messages for the receiver, in order (offer, usage, heartbeat)."""
        self._advance(now_ns)
        out = self._outbox
        self._outbox = []
        if self._awaiting_activation and (
            self._last_offer_ns is None or now_ns - self._last_offer_ns >= self._usage_interval_ns
        ):
            out.append(
                CapabilityOffer(
                    versions=self._negotiation.local_versions, qos_class=self._qos_class
                )
            )
            self._last_offer_ns = now_ns
        if self._key is not None and self._negotiation._state in (
            NegotiationState.ACTIVE,
            NegotiationState.FENCING,
            NegotiationState.STALE,
        ):
            usage = self._usage_due(now_ns)
            if usage is not None:
                out.append(usage)
            hb = None if self._ahead else self._heartbeat_due(now_ns)  # v2: the refresh report
            if hb is not None:
                out.append(hb)
        self._sent += len(out)
        if self._trace is not None:
            for m in out:
                self._trace.record(self._node, "send", {"msg": message_fields(m)})
        return [encode(m) for m in out]

    def _demand_unmet(self) -> bool:
        if self._key is None or not self._demand_target:
            return False
        granted = self._ledger.entry(self._key).grant_total
        return any(t > granted[r] for r, t in self._demand_target.items())

    def _starts_wanting(self) -> bool:
        # Demand is unmet, but the last reported target is covered by the grant: the receiver
        # thinks this key wants nothing and grants nothing more until it hears otherwise, so
        # the work would idle up to an interval (a sequential sender: every transfer). At most
        # one such report per grant that covers the reported target, so no flood: a sender
        # whose reported demand is still unmet is paced by the interval as before.
        if self._key is None or not self._demand_unmet():
            return False
        granted = self._ledger.entry(self._key).grant_total
        return all(t <= granted[r] for r, t in self._reported_target.items())

    def _usage_due(self, now_ns: int) -> SenderCreditUsage | None:
        # Pull: report when something changed, and keep re-reporting unmet demand every
        # interval, since a lost report must not leave the sender stalled for good. The interval
        # paces consumption, returns, re-reports and changes of a demand the receiver already
        # knows is unmet; only a sender that starts wanting skips it (_starts_wanting).
        if self._key is not None and self._ahead:
            return self._level_report(now_ns)
        if self._key is None or not (self._usage_dirty or self._demand_unmet()):
            return None
        if (
            self._last_usage_ns is not None
            and now_ns - self._last_usage_ns < self._usage_interval_ns
            and not self._starts_wanting()
        ):
            return None
        entry = self._ledger.entry(self._key)
        self._usage_sequence += 1
        self._usage_dirty = False
        self._last_usage_ns = now_ns
        self._reported_target = dict(self._demand_target)
        # The receiver reads an omitted resource as "unchanged", and consumed drops on a
        # rollback: so every resource this entry was granted is reported, zeros included (a
        # resource never granted was never consumed or returned, and may be one the receiver
        # does not model).
        granted = [r for r, total in entry.grant_total.items() if total]
        self._count_repeat(entry.consumed, entry.returned)
        return SenderCreditUsage(
            receiver_session_id=self._key.receiver_session,
            epoch=self._epoch,
            sequence=self._usage_sequence,
            qos_class=self._qos_class,
            consumed_totals=_amounts({r: entry.consumed[r] for r in granted}),
            returned_totals=_amounts({r: entry.returned[r] for r in granted}),
            pending_demand=_nonzero_amounts(self._demand_target),
        )

    def _refresh_ns(self) -> int:
        # Version 2's refresh (_levels rule 3): as configured, else half the freshness TTL
        # (where version 1 sends its heartbeat); 0: never.
        if self._refresh_interval_ns is not None:
            return self._refresh_interval_ns
        return self._negotiation._ttl_ms * 500_000

    def _level_report(self, now_ns: int) -> SenderCreditUsage | None:
        # Version 2 (_levels): a report only with news; its demand is consumed + returned +
        # level, so the receiver reads the level back as demand − consumed − returned.
        assert self._key is not None
        if not self._levels.due(now_ns, self._refresh_ns()):
            return None
        entry = self._ledger.entry(self._key)
        if self._levels.settling():
            idle = self._levels.idle(entry.available)
            if idle:  # rule 2: credit nothing waiting will use goes back with the report
                self._ledger.return_credit(self._key, CreditCharge.of(idle))
                entry = self._ledger.entry(self._key)
        level = self._levels.level()
        self._levels.sent(level, entry.returned, now_ns)
        # credit still idle after the report (the activation's grant beside a first report)
        # starts its hold now, not at some later event (rule 2)
        _, grant, consumed, returned = self._ledger.vectors(self._key)
        self._levels.observe(now_ns, grant, consumed, returned)
        self._usage_sequence += 1
        self._usage_dirty = False
        self._last_usage_ns = now_ns
        granted = [r for r, total in entry.grant_total.items() if total]
        # A u64 cannot state more: near a grant of 2**64 (a receiver's absurd or hostile
        # total) the report states U64_MAX, which the receiver reads as a lower level, asking
        # for less, never more, instead of failing to encode (found by the endpoint fuzz test).
        demand = {
            r: min(U64_MAX, entry.consumed[r] + entry.returned[r] + a) for r, a in level.items()
        }
        self._demand_target = demand
        self._count_repeat(entry.consumed, entry.returned)
        return SenderCreditUsage(
            receiver_session_id=self._key.receiver_session,
            epoch=self._epoch,
            sequence=self._usage_sequence,
            qos_class=self._qos_class,
            consumed_totals=_amounts({r: entry.consumed[r] for r in granted}),
            returned_totals=_amounts({r: entry.returned[r] for r in granted}),
            pending_demand=_nonzero_amounts(demand),
        )

    def _count_repeat(
        self, consumed: Mapping[CreditResource, int], returned: Mapping[CreditResource, int]
    ) -> None:
        # A report is a repeat when its demand beyond consumption and its returns are the
        # previous report's (statistics only: what the report says does not change)
        content = (
            tuple(sorted((r, t - consumed[r]) for r, t in self._demand_target.items())),
            tuple(sorted((r, a) for r, a in returned.items() if a)),
        )
        self._reports_repeated += content == self._last_report
        self._last_report = content

    def _heartbeat_due(self, now_ns: int) -> Heartbeat | None:
        ttl_ms = self._negotiation.freshness_ttl_ms
        age = self._negotiation.update_age_ns(now_ns)
        if self._key is None or ttl_ms == 0 or age is None or age * 2 < ttl_ms * 1_000_000:
            return None
        if (
            self._heartbeat_sent_ns is not None
            and now_ns - self._heartbeat_sent_ns < ttl_ms * 500_000
        ):
            return None
        self._heartbeat_sent_ns = now_ns
        return Heartbeat(
            receiver_session_id=self._key.receiver_session,
            epoch=self._epoch,
            qos_class=self._qos_class,
        )

    def get_timer(self) -> int | None:
        """The next ``now_ns`` at which :meth:`handle_timer` has work, or ``None``."""
        deadlines: list[int] = []
        if self._key is not None and self._ahead:
            refresh = self._refresh_ns()
            if self._levels.due(self._now_ns, refresh):
                deadlines.append(self._now_ns)
            elif (when := self._levels.timer(refresh)) is not None:
                deadlines.append(when)
        elif (self._usage_dirty or self._demand_unmet()) and self._last_usage_ns is not None:
            due = self._last_usage_ns + self._usage_interval_ns
            if due > self._now_ns and self._starts_wanting():
                due = self._now_ns  # reported at once (_starts_wanting)
            deadlines.append(due)
        if self._awaiting_activation and self._last_offer_ns is not None:
            deadlines.append(self._last_offer_ns + self._usage_interval_ns)
        stale_at = self._negotiation.stale_at_ns()  # one query: asked at every flush
        if stale_at is not None:
            if not self._ahead:  # the heartbeat at half the TTL
                deadlines.append(stale_at - self._negotiation._ttl_ms * 500_000)
            deadlines.append(stale_at)
        return min(deadlines) if deadlines else None
