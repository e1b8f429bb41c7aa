"""The gated spec's receiver: grant-ahead positions and the waiting line (:class:`GatedLine`).

The receiver keeps every key's unlanded credit topped up to its hold (:mod:`._ahead`) and serves
the keys whose top-up is due in one global **waiting line** (``GatedState.line``, key indices,
head first):

1. A key's position is evaluated when its level changes (a report), when its own data lands
   or its sender's returns are reclaimed (its unlanded credit fell), and for every key when
   the number of keys with a level changes (the fair share moved) or a key's offer arrives. A
   due key joins the back of the line; a key no longer due leaves it.
2. Whenever something may be granted (a key was evaluated, capacity was released, returned
   credit was reclaimed), the line is **served first come**: the head gets ``min(deficit, free
   units, max_grant units)`` units when that reaches its quantum (or is at least one unit, when
   the key holds nothing unlanded: no landing of its own would serve it again, and the rest of
   the capacity may be landed data its consumer holds), and goes to the back if it is still
   due; a head that cannot be served **stops the pass**, so nobody passes it. A pass also
   ends at a key it already served. A key therefore waits behind at most one grant to every
   other key (``bounded_bypass``). With ``hold_partial``, such a head with nothing unlanded
   is not granted part of its quantum by the pass: it waits (blocking the line) for its own
   release, which may complete the quantum and go out as one grant, or for
   ``grant_partial``, the receiver's timer, which grants it what is free and serves on.
3. ``retry`` (an update's ``retry_after_us``) is set exactly while the key is capped or in the
   line (:meth:`GatedLine.retry`).

The known-bad variants override :meth:`GatedLine.head_blocks_the_line`,
:meth:`GatedLine.join_line` or :meth:`GatedLine.evaluate_on_return`.
"""

from __future__ import annotations

from typing import Any

from ._ahead import Standing, standing, units_down
from ._values import GatedConfig, GatedState, ReceiverKey, Vec, _vadd, _vle, _vsub

_MEMO_LIMIT = 1 << 16  # position memo entries before the memo is cleared (speed only)


class GatedLine:
    """The receiver half of the gated spec's grants: positions, the line, the top-ups."""

    def __init__(self, config: GatedConfig) -> None:
        self.config = config
        self.name = config.name
        self._zero: Vec = (0, 0, 0)
        self._codes: dict[Any, tuple[Any, ...]] = {}  # pack memo (see ``pack``)
        self._positions: dict[tuple[ReceiverKey, int], Standing] = {}  # position memo

    # ---- policy hooks of the line (the known-bad variants override one) --------------------

    def head_blocks_the_line(self) -> bool:
        """Rule 2: a head that cannot be served stops the pass (nobody passes it)."""
        return True

    def evaluate_on_return(self) -> bool:
        """Rule 1: reclaimed returns re-evaluate the key (its unlanded credit fell)."""
        return True

    def join_line(self, line: tuple[int, ...], k: int) -> tuple[int, ...]:
        """Rule 1: a key that becomes due joins the back of the line (first come)."""
        return (*line, k)

    # ---- helpers -----------------------------------------------------------------------------

    @staticmethod
    def _set(items: tuple[Any, ...], index: int, value: Any) -> tuple[Any, ...]:
        return (*items[:index], value, *items[index + 1 :])

    def _with_receiver(self, state: GatedState, k: int, b: ReceiverKey) -> GatedState:
        return state._replace(receivers=self._set(state.receivers, k, b))

    def free_capacity(self, state: GatedState) -> Vec:
        """Capacity minus Σ over keys of (granted − released − reclaimed)
        (docs/semantics.md#receiver-allocator)."""
        free = self.config.capacity
        for b in state.receivers:
            free = _vsub(free, _vsub(_vsub(b.granted, b.released), b.reclaimed))
        return free

    @staticmethod
    def unlanded(b: ReceiverKey) -> Vec:
        """``granted − landed − reclaimed``: credit the sender holds unused or has in flight."""
        return _vsub(_vsub(b.granted, b.landed), b.reclaimed)

    @staticmethod
    def active(state: GatedState) -> int:
        """Keys of the receiver with a level (the fair share's divisor)."""
        return sum(1 for b in state.receivers if b.version and any(b.level))

    def position(self, state: GatedState, k: int) -> Standing:
        """Key ``k``'s grant-ahead position (:func:`~._ahead.standing`)."""
        b = state.receivers[k]
        active = max(1, self.active(state))
        memo = self._positions.get((b, active))
        if memo is None:
            if len(self._positions) >= _MEMO_LIMIT:
                self._positions.clear()
            memo = self._positions[(b, active)] = standing(
                b.level,
                self.unlanded(b),
                self.config.capacity,
                active=active,
                chunk=self.config.grant_chunk,
                settled=_vle(b.consumed, b.landed),
            )
        return memo

    def retry(self, state: GatedState, k: int) -> bool:
        """Rule 3: the key is capped or waits in the line."""
        return k in state.line or self.position(state, k).capped

    def _fits(self, state: GatedState, amounts: Vec) -> bool:
        """A grant of exactly ``amounts`` (``grant_exact``): something, within the free
        capacity and ``max_grant``."""
        return (
            any(amounts)
            and _vle(amounts, self.free_capacity(state))
            and _vle(amounts, self.config.max_grant)
        )

    def _grant(self, state: GatedState, k: int, amounts: Vec) -> GatedState:
        """Grant ``amounts`` to key ``k``; every other key in the line counts one bypass."""
        b = state.receivers[k]
        b = b._replace(granted=_vadd(b.granted, amounts), grants_unsent=True)
        state = self._with_receiver(state, k, b)
        bypass = tuple(
            n + 1 if j != k and j in state.line else n for j, n in enumerate(state.bypass)
        )
        return state._replace(bypass=bypass)

    # ---- the line ----------------------------------------------------------------------------

    def _join(self, state: GatedState, k: int) -> GatedState:
        return state._replace(
            line=self.join_line(state.line, k), bypass=self._set(state.bypass, k, 0)
        )

    def _leave(self, state: GatedState, k: int) -> GatedState:
        return state._replace(
            line=tuple(j for j in state.line if j != k), bypass=self._set(state.bypass, k, 0)
        )

    def evaluate(self, state: GatedState, k: int) -> GatedState:
        """Rule 1: a due key joins the back of the line (if not in it); else it leaves it."""
        if self.position(state, k).due:
            return state if k in state.line else self._join(state, k)
        return self._leave(state, k)

    def evaluate_all(self, state: GatedState) -> GatedState:
        """Every key with an offer, in key order (the receiver's connection order)."""
        for k, b in enumerate(state.receivers):
            if b.version:
                state = self.evaluate(state, k)
        return state

    def serve(self, state: GatedState, partial: int = -1) -> GatedState:
        """Rule 2: serve the line first come, until a head cannot be served or was served.
        ``partial``: the key whose partial grant the timer released (``hold_partial``)."""
        hold = self.config.hold_partial
        served: set[int] = set()
        skipped: list[int] = []  # heads passed over (only by the known-bad variant)
        while len(skipped) < len(state.line):
            k = state.line[len(skipped)]
            if k in served:
                break
            position = self.position(state, k)
            if not position.due:
                state = self._leave(state, k)
                continue
            free = self.free_capacity(state)
            max_units = units_down(self.config.max_grant, position.unit)
            if not max_units:  # max_grant is below one charge: never granted ahead
                state = self._leave(state, k)
                continue
            units = min(position.deficit, units_down(free, position.unit), max_units)
            amounts = position.top_up(units)
            short = units < min(position.quantum, max_units) and (
                position.held or not units or (hold and k != partial)
            )
            if short or not self._fits(state, amounts):
                if self.head_blocks_the_line():
                    break  # the head waits for capacity: nobody passes it
                skipped.append(k)
                continue
            state = self._grant(state, k, amounts)
            served.add(k)
            state = self._leave(state, k)
            if self.position(state, k).due:  # still short: the back of the line
                state = self._join(state, k)
        return state

    # ---- the timer of a held partial grant (``hold_partial``) ------------------------------

    def _g_grant_partial(self, state: GatedState) -> str | None:
        if not self.config.hold_partial:
            return "partial grants are not held"
        if not state.line:
            return "the line is empty"
        if self.serve(state, partial=state.line[0]) == state:
            return "the head waits for nothing the timer grants"
        return None

    def _e_grant_partial(self, state: GatedState) -> GatedState:
        return self.serve(state, partial=state.line[0])

    # ---- events ------------------------------------------------------------------------------

    def level_changed(self, state: GatedState, k: int, before: int) -> GatedState:
        """A report changed key ``k``'s level (``before``: the active count before it)."""
        if self.active(state) != before:
            state = self.evaluate_all(state)
        else:
            state = self.evaluate(state, k)
        return self.serve(state)

    def landed(self, state: GatedState, k: int) -> GatedState:
        """Data of key ``k`` landed: its unlanded credit fell."""
        return self.serve(self.evaluate(state, k))

    def grant_initial(self, state: GatedState, k: int) -> GatedState:
        """The activation's grant: what the initial grant still lacks, exactly or not at
        all."""
        b = state.receivers[k]
        initial = self.config.initial_grant
        want = tuple(max(0, i - g) for i, g in zip(initial, b.granted, strict=True))
        if any(want) and self._fits(state, want):
            state = self._grant(state, k, want)
        return state
