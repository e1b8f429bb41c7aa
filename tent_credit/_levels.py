"""When a version-2 sender reports its level (grant-ahead, see :mod:`._ahead`).

Under protocol version 2 a usage report states the sender's **level**: the charges of its work
on the key that is in flight (committed, not completed) or waiting for credit (the gate's
credit-stalled owners). The receiver keeps the key topped up from that level as the key's data
lands, so a sender reports only when it has news (docs/credit_protocol.md "Grant-ahead"):

1. **A rise** (some resource's level above the one last reported) or **a return** (the gate gave
   idle credit back: the returned totals changed) goes out at once.
2. **Idle credit** (credit on hand beyond the whole level: what the work in flight and the
   waiting work would need again) that has lasted ``hold_ns`` without a break goes back, with
   a report of the current level. A lower level alone is not news: the receiver tops a key up
   only as its data lands, so a sender whose backlog shrank ends up holding the excess as idle
   credit, and returns it then. Beyond the level, not beyond the waiting work alone: between
   a write's landing and its completion the receiver has already topped the key up for that
   write while the sender still counts it in its level, so returning that top-up would have it
   granted straight back, again and again for as long as the completion takes (found by ``tent
   check``: the grants of ``gated/bad/no_idle_return`` grew without bound). Work that
   arrives in bursts (a lane that resubmits a moment after its completion) keeps its credit
   across the gaps instead of paying two reports per gap; credit nothing will use goes back to
   the keys that can use it (a grant that arrived after the work left, say). The activation's
   grant is not idle before the entry's first report: it was given ahead of any work.
3. **A refresh** (the last report again) goes out every ``refresh_ns`` (half the freshness
   TTL; 0: never): the receiver answers it with the key's full vector. This is the only
   repeat. Totals are cumulative, so over a lossy channel the two refreshes (this one and the
   receiver's refresh timer) recover any lost report or update; over TCP nothing is lost
   without the connection, and a new connection starts a new epoch.
4. **Mixed charges** (docs/credit_protocol.md#mixed-charges). The receiver grants in units of
   the level over the gcd of its amounts; a level of a one-block and a two-block write has
   the whole level as its unit, more than the capacity may hold, and the key was never
   granted ahead (it waited for good). So while work waits, the level is stated in whole
   charges of the **head** (the first waiting charge, :func:`~._ahead.in_heads`), and a lower
   level is news when its unit differs from the last reported one's: the receiver's unit is
   then always a charge the head can use. A sender whose charges are all one size states the
   same level as before and sends nothing more.

5. **Uncovered credit** (docs/credit_protocol.md#uncovered-credit). Credit on hand that does
   not cover the head's charge (an activation grant below it, a grant made for a smaller head
   that arrived after a larger one blocked, a refused submit's smaller charge) goes back at
   once, all of it, with a report (a return is news). The receiver grants whole charges only
   and never completes such a *fragment*, so two keys that each hold one cannot wait for
   each other (two senders, two blocks of capacity, one-block activation grants, two-block
   writes: both waited for good before 7 December 2026), and a return never crosses a grant
   sent to complete it.

Consumed totals alone are never news: the receiver needs them only to check a report. This
module is pure bookkeeping: the endpoint owns the clock and the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

from ._ahead import in_heads, unit_of
from ._types import CreditResource

__all__ = ["LevelReports"]

Vector = Mapping[CreditResource, int]
# Each resource's index in a ledger vector, as a plain int at run time: an int indexes a list
# and finds a CreditResource key (same hash, same equality) at half an enum member's cost.
_VALUES = cast("tuple[CreditResource, ...]", tuple(int(r) for r in CreditResource))
# The members themselves, for a dict handed to the ledger (iterating the enum class runs a
# Python generator per member)
_MEMBERS = tuple(CreditResource)


def _plus(a: Vector, b: Vector) -> dict[CreditResource, int]:
    out = dict(a)
    for r, v in b.items():
        out[r] = out.get(r, 0) + v
    return {r: v for r, v in out.items() if v}


def _nonzero(vector: Vector) -> dict[CreditResource, int]:
    return {r: a for r, a in vector.items() if a}


class LevelReports:
    """The version-2 report decision of one sender endpoint (module docstring).

    ``hold_ns`` is rule 2's hold (≥ 0). Not thread-safe; the endpoint validates every input.
    """

    def __init__(self, hold_ns: int) -> None:
        self._hold_ns = hold_ns
        self.in_flight: dict[CreditResource, int] = {}
        self.waiting: dict[CreditResource, int] = {}
        self.head: dict[CreditResource, int] = {}  # the first waiting charge ({}: none)
        self._reported: dict[CreditResource, int] | None = None
        self._reported_unit: dict[CreditResource, int] = {}  # unit_of(_reported), kept with it
        self._reported_returned: dict[CreditResource, int] = {}
        self._reported_ns = 0
        self._quiet_since: int | None = None  # rule 2's condition holds since then
        self._news = False  # rule 1 holds (a rise or a return), as of the last observe
        # level() and the in_flight, waiting and head dicts it was computed from: they are only
        # ever replaced, never changed in place (commit, complete, raise_waiting, unwait, or a
        # new dict assigned), so their identity says whether it still holds
        self._level: dict[CreditResource, int] = {}
        self._level_of: tuple[object, object, object] = (self.in_flight, self.waiting, self.head)
        self._level_unit: dict[CreditResource, int] | None = None  # unit_of(_level), when asked

    def reset(self, now_ns: int) -> None:
        """A new credit key (activation or epoch): nothing is in flight, waiting or reported on
        it (owners pinned to the old entry cannot spend the new one; the gate states what
        waits on the new entry when its owners block there)."""
        self.in_flight = {}
        self.waiting = {}
        self.head = {}
        self._reported = None
        self._reported_unit = {}
        self._reported_returned = {}
        self._reported_ns = now_ns
        self._quiet_since = None
        self._news = False

    @property
    def reported(self) -> dict[CreditResource, int]:
        """The level the last report on this key stated (``{}``: none yet)."""
        return dict(self._reported or {})

    @property
    def reported_returned(self) -> dict[CreditResource, int]:
        """The returned totals the last report on this key carried (non-zero amounts)."""
        return dict(self._reported_returned)

    def level(self) -> dict[CreditResource, int]:
        """In flight plus waiting, per resource (non-zero amounts only), in whole heads while
        a head waits (rule 4). Read only: the same dict until an input changes (a sender reads
        it several times per transfer)."""
        in_flight, waiting, head = self.in_flight, self.waiting, self.head
        source = self._level_of
        if source[0] is not in_flight or source[1] is not waiting or source[2] is not head:
            # nothing waiting (a pipelined sender's usual case): the level is in_flight itself,
            # which holds no zero (commit and complete filter them) and is never changed in place
            level = _plus(in_flight, waiting) if waiting else in_flight
            self._level = in_heads(level, head) if head else level
            self._level_of = (in_flight, waiting, head)
            self._level_unit = None
        return self._level

    def _unit(self) -> dict[CreditResource, int]:
        # unit_of(level()), computed once per level: rule 4 compares it at every observe while
        # a head waits, several times per transfer under contention
        level = self.level()
        unit = self._level_unit
        if unit is None:
            unit = self._level_unit = unit_of(level)
        return unit

    def commit(self, charge: Vector) -> None:
        self.in_flight = _plus(self.in_flight, charge)

    def complete(self, charge: Vector) -> None:
        out = dict(self.in_flight)
        for r, a in charge.items():
            out[r] = out.get(r, 0) - a
        self.in_flight = {r: v for r, v in out.items() if v}

    def raise_waiting(self, charge: Vector) -> bool:
        """At least ``charge`` waits (a retried charge is not counted twice); whether the
        waiting work rose."""
        waiting = self.waiting
        raised = {r: a for r, a in charge.items() if a > waiting.get(r, 0)}
        if raised:
            self.waiting = {**waiting, **raised}
        if not self.head:  # the first charge that waits
            self.head = {r: a for r, a in charge.items() if a}
            raised = raised or self.head
        return bool(raised)

    def unwait(self, charge: Vector) -> None:
        """``charge`` was reserved: it waits no more (it joins the level as in flight once
        committed)."""
        self.waiting = {
            r: left for r, w in self.waiting.items() if (left := w - charge.get(r, 0)) > 0
        }
        self.head = {}  # the head was reserved; the next block names the next one

    def idle(self, available: Vector) -> dict[CreditResource, int]:
        """Credit on hand beyond the whole level, in flight plus waiting (rule 2)."""
        level = self.level()
        return {r: a - level.get(r, 0) for r, a in available.items() if a > level.get(r, 0)}

    def uncovered(
        self, grant: Sequence[int], consumed: Sequence[int], returned: Sequence[int]
    ) -> dict[CreditResource, int]:
        """Rule 5: the credit on hand (``grant − consumed − returned``, non-zero amounts) when
        it does not cover the head's charge, else ``{}`` (no head, or it is covered)."""
        head = self.head
        if not head:
            return {}
        for r, a in head.items():
            if grant[r] - consumed[r] - returned[r] < a:
                on_hand = {}
                for q in _MEMBERS:
                    left = grant[q] - consumed[q] - returned[q]
                    if left > 0:
                        on_hand[q] = left
                return on_hand
        return {}

    def observe(
        self, now_ns: int, grant: Sequence[int], consumed: Sequence[int], returned: Sequence[int]
    ) -> None:
        """Re-evaluate rule 1 and start or clear rule 2's hold from the current level and the
        entry's totals, each indexed by resource value (the ledger's own vectors: credit on
        hand is ``grant − consumed − returned``). Call after any change of them; :meth:`due`
        then only compares times."""
        # Plain loops over the resource values, not any() over generators or mappings built
        # for the call: a sender observes several times per transfer, and under contention
        # every call of this path is paid cold.
        level = self.level()
        # news: the non-zero returned totals differ from those last reported (which hold only
        # non-zero amounts)
        reported_returned = self._reported_returned
        news = False
        count = 0
        for r in _VALUES:
            a = returned[r]
            if a:
                count += 1
                if reported_returned.get(r) != a:
                    news = True
                    break
        if count != len(reported_returned):
            news = True
        if not news:
            reported = self._reported or {}
            for r, a in level.items():
                if a > reported.get(r, 0):
                    news = True
                    break
            else:
                # rule 4: a waiting head, and the unit the receiver grants in is not its own
                news = bool(self.head) and self._unit() != self._reported_unit
        self._news = news
        # rule 2: some credit on hand beyond the level (what idle() would return is non-empty)
        quiet = False
        if self._reported is not None:
            for r in _VALUES:
                if grant[r] - consumed[r] - returned[r] > level.get(r, 0):
                    quiet = True
                    break
        if not quiet:
            self._quiet_since = None
        elif self._quiet_since is None:
            self._quiet_since = now_ns

    def due(self, now_ns: int, refresh_ns: int) -> bool:
        """Whether a report goes out now (rules 1-3, as of the last :meth:`observe`; a new
        entry starts from "nothing reported": its first level or return is a rise)."""
        if self._news:
            return True
        if self._quiet_since is not None and now_ns - self._quiet_since >= self._hold_ns:
            return True
        return bool(refresh_ns) and now_ns - self._reported_ns >= refresh_ns

    def settling(self) -> bool:
        """Rule 2 is what makes the report due: it returns the idle credit."""
        return self._quiet_since is not None

    def timer(self, refresh_ns: int) -> int | None:
        """When rule 2's hold or rule 3's refresh is next due (``None``: neither)."""
        deadlines = []
        if self._quiet_since is not None:
            deadlines.append(self._quiet_since + self._hold_ns)
        if refresh_ns:
            deadlines.append(self._reported_ns + refresh_ns)
        return min(deadlines, default=None)

    def sent(self, level: Vector, returned: Vector, now_ns: int) -> None:
        """A report of ``level`` and ``returned`` went out at ``now_ns``."""
        self._reported = dict(level)
        self._reported_unit = unit_of(self._reported)
        self._reported_returned = _nonzero(returned)
        self._reported_ns = now_ns
        self._quiet_since = None
        self._news = False
