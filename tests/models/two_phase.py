"""Two-phase commit (Gray and Lamport's TwoPhase) as a user's own model, with the chart hook.

The same model as ``docs/charts.md``: a transaction manager (TM), resource managers (RMs) and
a network that keeps every message sent (a set: delivery does not consume it, as in the TLA+
spec). ``BrokenTwoPhase`` lets a prepared RM still abort on its own, so one RM commits while
another aborts.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import NamedTuple

from tent_models import Model, Verdict, action, invariant, witness


class TwoPC(NamedTuple):
    rm: tuple[str, ...]  # "working", "prepared", "committed", "aborted"
    tm: str  # "init", "committed", "aborted"
    prepared: frozenset[int]  # the RMs the TM heard "Prepared" from
    msgs: frozenset[tuple[Hashable, ...]]  # ("Prepared", r), ("Commit",), ("Abort",)


def _rms(model: TwoPhase, s: TwoPC) -> range:
    return range(model.n)


class TwoPhase(Model[TwoPC]):
    name = "two_phase"

    def __init__(self, n: int = 2) -> None:
        self.n = n

    def initial_states(self) -> list[TwoPC]:
        return [TwoPC(("working",) * self.n, "init", frozenset(), frozenset())]

    def _set(self, s: TwoPC, r: int, value: str) -> tuple[str, ...]:
        return (*s.rm[:r], value, *s.rm[r + 1 :])

    @action(over=_rms)
    def rm_prepare(self, s: TwoPC, r: int) -> TwoPC | None:
        if s.rm[r] != "working":
            return None
        return s._replace(rm=self._set(s, r, "prepared"), msgs=s.msgs | {("Prepared", r)})

    @action(over=_rms)
    def rm_choose_to_abort(self, s: TwoPC, r: int) -> TwoPC | None:
        if s.rm[r] != "working":
            return None
        return s._replace(rm=self._set(s, r, "aborted"))

    @action(over=_rms)
    def tm_rcv_prepared(self, s: TwoPC, r: int) -> TwoPC | None:
        if s.tm != "init" or ("Prepared", r) not in s.msgs or r in s.prepared:
            return None
        return s._replace(prepared=s.prepared | {r})

    @action
    def tm_commit(self, s: TwoPC) -> TwoPC | None:
        if s.tm != "init" or len(s.prepared) != self.n:
            return None
        return s._replace(tm="committed", msgs=s.msgs | {("Commit",)})

    @action
    def tm_abort(self, s: TwoPC) -> TwoPC | None:
        if s.tm != "init":
            return None
        return s._replace(tm="aborted", msgs=s.msgs | {("Abort",)})

    @action(over=_rms)
    def rm_rcv_commit(self, s: TwoPC, r: int) -> TwoPC | None:
        if ("Commit",) not in s.msgs or s.rm[r] == "committed":
            return None
        return s._replace(rm=self._set(s, r, "committed"))

    @action(over=_rms)
    def rm_rcv_abort(self, s: TwoPC, r: int) -> TwoPC | None:
        if ("Abort",) not in s.msgs or s.rm[r] == "aborted":
            return None
        return s._replace(rm=self._set(s, r, "aborted"))

    @invariant(cites="no RM commits while another aborts")
    def consistent(self, s: TwoPC) -> Verdict:
        committed = tuple(r for r, v in enumerate(s.rm) if v == "committed")
        aborted = tuple(r for r, v in enumerate(s.rm) if v == "aborted")
        return Verdict(not (committed and aborted), committed=committed, aborted=aborted)

    @witness
    def all_committed(self, s: TwoPC) -> bool:
        return all(v == "committed" for v in s.rm)

    def is_terminal(self, s: TwoPC) -> bool:
        # the protocol ends: every RM decided (a finished state, not a deadlock)
        return all(v in ("committed", "aborted") for v in s.rm)

    # --- the chart hook (docs/charts.md) ------------------------------------------------------

    def lifelines(self) -> tuple[str, ...]:
        return ("TM", "network", *(f"RM{r}" for r in range(self.n)))

    def locate(
        self, s: TwoPC, action: str, args: tuple[Hashable, ...]
    ) -> tuple[str, str, str | None, str | None]:
        rm = f"RM{args[0]}" if args else ""
        return {
            "rm_prepare": ("send", rm, "network", "Prepared"),
            "rm_choose_to_abort": ("local", rm, None, "abort"),
            "tm_rcv_prepared": ("deliver", "network", "TM", f"Prepared from {rm}"),
            "tm_commit": ("send", "TM", "network", "Commit"),
            "tm_abort": ("send", "TM", "network", "Abort"),
            "rm_rcv_commit": ("deliver", "network", rm, "Commit"),
            "rm_rcv_abort": ("deliver", "network", rm, "Abort"),
        }[action]


class BrokenTwoPhase(TwoPhase):
    """A prepared RM may still abort on its own: it broke its promise to the TM."""

    name = "two_phase/broken"

    @action(over=_rms)
    def rm_choose_to_abort(self, s: TwoPC, r: int) -> TwoPC | None:
        if s.rm[r] not in ("working", "prepared"):
            return None
        return s._replace(rm=self._set(s, r, "aborted"))
