"""The admission spec as a ``SpecModel``: :class:`AdmissionSpec` adds to the actions and
invariants what the checker and the conformance runner call: the initial state, successors with
explicit arguments, ``apply`` / ``explain`` for replay, the packed encoding and the display.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from tent_spec.admission._invariants import AdmissionInvariants
from tent_spec.admission._state import (
    CANCELED,
    DISPATCHING,
    QUEUED,
    TERMINAL,
    TERMINAL_STATUSES,
    AdmissionConfig,
    AdmissionState,
    Owner,
    Step,
    _pack_owner,
    _pack_pick,
)


class AdmissionSpec(AdmissionInvariants):
    """The admission queue specification for one :class:`AdmissionConfig`.

    Structurally satisfies ``tent_models.model_api.SpecModel``. The action methods (``admit``,
    ``pick``, ...) return the successor state, or ``None`` when their guard is false; they never
    raise for a disabled action.
    """

    def __init__(self, config: AdmissionConfig) -> None:
        super().__init__(config)
        self._owner_codes: dict[Owner, tuple[int, ...]] = {}

    # --- model_api plumbing --------------------------------------------------------------------

    def initial_states(self) -> Iterable[AdmissionState]:
        """The empty queue at time 0 with the configured initial bandwidth."""
        return (
            AdmissionState(
                now_ns=0,
                bandwidth_bps=self.config.initial_bandwidth_bps,
                next_owner_id=1,  # docs/semantics.md#admission-queue: "owner ids from 1, monotonic"
                submitted=(False,) * len(self.config.submits),
                owners=(),
                queue=(),
                outstanding_owners=0,
                outstanding_bytes=0,
                user_owners=0,
                user_bytes=0,
                dispatching_bytes=0,
                last_pick=None,
            ),
        )

    def action_names(self) -> Sequence[str]:
        """Every action of the model."""
        return self.ACTIONS

    def unreachable_actions(self) -> frozenset[str]:
        """Actions the configuration cannot fire (no time steps, a single bandwidth value)."""
        unreachable = set()
        if not self.config.time_steps_ns or self.config.max_time_ns == 0:
            unreachable.add("advance_time")
        if len(set(self.config.bandwidths)) < 2:
            unreachable.add("set_bandwidth")
        return frozenset(unreachable)

    def fault_actions(self) -> frozenset[str]:
        """None: gate rejections are explicit pick arguments, not a separate fault action."""
        return frozenset()

    def canonicalize(self, state: AdmissionState) -> AdmissionState:
        """Identity: owner ids are ordered by admission, so no two owners are interchangeable."""
        return state

    def within_bounds(self, state: AdmissionState) -> bool:
        """The clock is within ``max_time_ns`` (every other bound is an action guard)."""
        return state.now_ns <= self.config.max_time_ns

    def quiescent_by_bound(self, state: AdmissionState) -> bool:
        """The workload is exhausted, every owner is retired and the clock is at its bound."""
        clock_capped = all(
            state.now_ns + dt > self.config.max_time_ns for dt in self.config.time_steps_ns
        )
        return all(state.submitted) and not state.owners and clock_capped

    def recovered(self, state: AdmissionState) -> bool:
        """No owner left non-terminal and every counter back to zero (all capacity usable)."""
        return (
            all(owner.state == TERMINAL for owner in state.owners)
            and state.outstanding_owners == 0
            and state.outstanding_bytes == 0
            and state.user_owners == 0
            and state.user_bytes == 0
            and state.dispatching_bytes == 0
        )

    def pack(self, state: AdmissionState) -> tuple[Any, ...]:
        """A nested tuple of ints, injective on states (owner and pick codes are memoised)."""
        bandwidth = (0, 0) if state.bandwidth_bps is None else (1, state.bandwidth_bps)
        codes = self._owner_codes
        owners = []
        for owner in state.owners:
            code = codes.get(owner)
            if code is None:
                code = codes[owner] = _pack_owner(owner)
            owners.append(code)
        return (
            state.now_ns,
            bandwidth,
            state.next_owner_id,
            tuple(map(int, state.submitted)),
            tuple(owners),
            state.queue,
            state.outstanding_owners,
            state.outstanding_bytes,
            state.user_owners,
            state.user_bytes,
            state.dispatching_bytes,
            () if state.last_pick is None else _pack_pick(state.last_pick),
        )

    def lifelines(self) -> tuple[str, ...]:
        """The sequence chart's nodes: the application that submits and cancels, the queue,
        the transport that runs dispatched owners and measures bandwidth."""
        return ("application", "queue", "transport")

    def locate(
        self, state: AdmissionState, action: str, args: tuple[Hashable, ...]
    ) -> tuple[str, str, str | None, str | None]:
        """Where ``action(args)`` happens on the chart: a submit or cancel goes from the
        application to the queue, a pick dispatches to the transport, a completion or a
        bandwidth sample comes back from it; retiring a batch and time are the queue's."""
        if action == "admit":
            return ("send", "application", "queue", f"submit batch {args[0]}")
        if action == "cancel":
            return ("send", "application", "queue", f"cancel owner {args[0]}")
        if action == "pick":
            return ("send", "queue", "transport", f"pick ≤{args[0]} owner(s) ≤{args[1]} B")
        if action == "complete":
            return ("deliver", "transport", "queue", f"owner {args[0]} {args[1]}")
        if action == "set_bandwidth":
            return ("deliver", "transport", "queue", f"bandwidth {args[0]} B/s")
        return ("local", "queue", None, None)

    def describe(self, state: AdmissionState) -> Mapping[str, object]:
        """A flat ``field -> value`` view for diff-only counterexamples."""
        view: dict[str, object] = {
            "now_ns": state.now_ns,
            "bandwidth_bps": state.bandwidth_bps,
            "next_owner_id": state.next_owner_id,
            "submitted": state.submitted,
            "queue": state.queue,
            "outstanding_owners": state.outstanding_owners,
            "outstanding_bytes": state.outstanding_bytes,
            "user_owners": state.user_owners,
            "user_bytes": state.user_bytes,
            "dispatching_bytes": state.dispatching_bytes,
        }
        for o in state.owners:
            status = o.state if o.status is None else f"{o.state}({o.status})"
            flags = "".join(
                (" dropped" if o.dropped else "", " was_blocked" if o.was_blocked else "")
            )
            view[f"owner[{o.owner_id}]"] = (
                f"{status} batch={o.batch} {o.kind} len={o.length} deadline={o.deadline_ns}"
                f" eligible={o.degradation_eligible} gate={o.gate_key}{flags}"
            )
        if state.last_pick is not None:
            for field, value in state.last_pick._asdict().items():
                view[f"last_pick.{field}"] = value
        return view

    # --- successors / apply / explain ----------------------------------------------------------

    def successors(self, state: AdmissionState) -> Iterator[Step]:
        """Every enabled action instance, with explicit arguments, and its successor."""
        cfg = self.config
        for index, submit in enumerate(cfg.submits):
            if not state.submitted[index]:
                args: tuple[Hashable, ...] = (submit.batch, submit.owners)
                nxt = self.admit(state, submit.batch, submit.owners)
                if nxt is not None:
                    yield Step("admit", args, nxt)
        if state.queue:
            for max_owners, max_bytes in cfg.dispatch_windows:
                for answers, nxt in self._pick_branches(state, max_owners, max_bytes):
                    yield Step("pick", (max_owners, max_bytes, answers), nxt)
        for owner in state.owners:
            if owner.state == DISPATCHING:
                for status in cfg.complete_statuses:
                    nxt = self.complete(state, owner.owner_id, status)
                    if nxt is not None:
                        yield Step("complete", (owner.owner_id, status), nxt)
            if owner.state == QUEUED or owner.status == CANCELED:
                nxt = self.cancel(state, owner.owner_id)
                if nxt is not None:
                    yield Step("cancel", (owner.owner_id,), nxt)
        for batch in sorted({owner.batch for owner in state.owners}):
            nxt = self.retire(state, batch)
            if nxt is not None:
                yield Step("retire", (batch,), nxt)
        for dt in cfg.time_steps_ns:
            nxt = self.advance_time(state, dt)
            if nxt is not None:
                yield Step("advance_time", (dt,), nxt)
        for bandwidth in cfg.bandwidths:
            nxt = self.set_bandwidth(state, bandwidth)
            if nxt is not None:
                yield Step("set_bandwidth", (bandwidth,), nxt)

    def apply(
        self, state: AdmissionState, action: str, args: tuple[Hashable, ...]
    ) -> AdmissionState | None:
        """The successor of one action instance, or ``None`` if its guard is false (or the
        arguments are malformed for the action)."""
        reason = self._malformed(action, args)
        if reason is not None:
            return None
        if action == "admit":
            return self.admit(state, args[0], args[1])  # type: ignore[arg-type]
        if action == "pick":
            return self.pick(state, args[0], args[1], args[2])  # type: ignore[arg-type]
        if action == "complete":
            return self.complete(state, args[0], args[1])  # type: ignore[arg-type]
        if action == "cancel":
            return self.cancel(state, args[0])  # type: ignore[arg-type]
        if action == "retire":
            return self.retire(state, args[0])  # type: ignore[arg-type]
        if action == "advance_time":
            return self.advance_time(state, args[0])  # type: ignore[arg-type]
        return self.set_bandwidth(state, args[0])  # type: ignore[arg-type]

    def explain(self, state: AdmissionState, action: str, args: tuple[Hashable, ...]) -> str:
        """Which guard of ``action(args)`` fails in ``state``, in words ("enabled" if none)."""
        malformed = self._malformed(action, args)
        if malformed is not None:
            return malformed
        if action == "admit":
            return self._explain_admit(state, args[0], args[1])  # type: ignore[arg-type]
        if action == "pick":
            return self._explain_pick(state, args[0], args[1], args[2])  # type: ignore[arg-type]
        if action in ("complete", "cancel"):
            owner = self._owner(state, args[0])  # type: ignore[arg-type]
            if owner is None:
                return f"{action}: no owner {args[0]} (unknown or retired): InvalidEntry"
            if action == "complete":
                if args[1] not in TERMINAL_STATUSES:
                    return f"complete: {args[1]!r} is not a terminal status: InvalidArgument"
                if owner.state != DISPATCHING:
                    return f"complete: owner {owner.owner_id} is {owner.state}, not DISPATCHING"
                if args[1] not in self.config.complete_statuses:
                    return f"complete: status {args[1]} is outside the configured statuses"
                return "enabled"
            if owner.state == QUEUED or owner.status == CANCELED:
                return "enabled"
            return f"cancel: owner {owner.owner_id} is {owner.state}({owner.status}): InvalidEntry"
        if action == "retire":
            batch_owners = [o for o in state.owners if o.batch == args[0]]
            if not batch_owners:
                return f"retire: batch {args[0]} has no records"
            live = [o.owner_id for o in batch_owners if o.state != TERMINAL]
            if live:
                return f"retire: owners {live} of batch {args[0]} are not terminal: InvalidEntry"
            return "enabled"
        if action == "advance_time":
            if args[0] not in self.config.time_steps_ns:
                return f"advance_time: {args[0]} is not a configured time step"
            if state.now_ns + args[0] > self.config.max_time_ns:
                return f"advance_time: now would pass max_time_ns={self.config.max_time_ns}"
            return "enabled"
        if args[0] not in self.config.bandwidths:
            return f"set_bandwidth: {args[0]} is not a configured bandwidth"
        if args[0] == state.bandwidth_bps:
            return "set_bandwidth: the bandwidth is already that value"
        return "enabled"

    def _malformed(self, action: str, args: tuple[Hashable, ...]) -> str | None:
        arity = {
            "admit": 2,
            "pick": 3,
            "complete": 2,
            "cancel": 1,
            "retire": 1,
            "advance_time": 1,
            "set_bandwidth": 1,
        }
        if action not in arity:
            return f"unknown action {action!r}"
        if not isinstance(args, tuple) or len(args) != arity[action]:
            return f"{action} takes {arity[action]} arguments, got {args!r}"
        return None
