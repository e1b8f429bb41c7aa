"""What one shard of the sharded BFS holds between commands, and its messaging.

:class:`_ShardState` is the base of :class:`~._shard.Worker`: its construction (the seen set,
frontier, coverage counters, parent links and the invariant checker it keeps across levels),
its tagged sends and :class:`_Mailbox`, and the fix-ups (indices of states this shard generated
but another owns) it delivers with the next batch or on a flush. The level loop and the answers
after it are the worker's own.
"""

from __future__ import annotations

import resource
from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

from tent_models.checker._bfs import new_exploration, new_state_checker
from tent_models.checker._seen import ShardSeen
from tent_models.checker._shard_values import FrontierItem, Options, _Won
from tent_models.checker._trace import ActionInstance
from tent_models.model_api import SpecModel


class _Mailbox:
    """Tagged worker-to-worker messages; early messages of a later phase are buffered."""

    def __init__(self, inbox: Any) -> None:  # anything with a blocking ``get()``
        self.inbox = inbox
        self.pending: dict[tuple[str, int, int], Any] = {}

    def collect(self, tag: str, level: int, senders: Sequence[int]) -> dict[int, Any]:
        wanted = {(tag, level, sender) for sender in senders}
        while not wanted <= self.pending.keys():
            msg_tag, msg_level, sender, payload = self.inbox.get()
            self.pending[(msg_tag, msg_level, sender)] = payload
        return {key[2]: self.pending.pop(key) for key in wanted}


def _rss_bytes() -> int:
    """This process's resident set now (``/proc``; 0 where there is none)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize()
    except OSError:
        return 0


class _ShardState:
    """A shard's state and its exchanges that touch nothing else (see the module docstring);
    :class:`~._shard.Worker` adds the levels and the commands."""

    def __init__(
        self,
        model: SpecModel[Any],
        *,
        me: int,
        options: Options,
        inboxes: Sequence[Any],
        seen: ShardSeen,
        frontier: list[FrontierItem],
        inbox: Any = None,
    ) -> None:
        """``inboxes[w].put(message)`` reaches worker ``w``; this worker reads its own from
        ``inbox`` (default ``inboxes[me]``, a multiprocessing queue)."""
        self.model = model
        self.me = me
        self.options = options
        self.count = options.workers
        self.inboxes = inboxes
        self.mailbox = _Mailbox(inboxes[me] if inbox is None else inbox)
        self.others = [w for w in range(self.count) if w != me]
        self.seen = seen  # the fingerprints this shard owns (fp % W == me)
        self.frontier = frontier  # in index order
        self.level = 0  # commands handled: every message is tagged with it
        self.rss_start = _rss_bytes()
        names = list(model.action_names())
        self.enabled = dict.fromkeys(names, 0)
        self.fired = dict.fromkeys(names, 0)
        self.new_states = dict.fromkeys(names, 0)
        self.recovered_indices = array("I")
        self.edge_src = array("I")  # recoverability edges: source index, target fingerprint
        self.edge_fp = array("Q")
        self.explored_bytes = 0  # storage() before the edges went to the coordinator
        # parent links of the stored states this shard generated, in index order: the parent's
        # index and an id into action_table; blocks maps index ranges to local positions
        self.parent = array("i")
        self.action_ids = array("I")
        self.flags = bytearray()  # per stored state: 1 when outside the bounds
        self.blocks: list[tuple[int, int, int]] = []  # (first index, local position, count)
        self.action_index: dict[ActionInstance, int] = {}
        self.action_table: list[ActionInstance] = []
        # indices of states this shard generated but another owns, sent with the next batch
        self.fixups: list[list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]] = [
            [] for _ in range(self.count)
        ]
        # the last level's new states (generated here), in key order; None before the first
        # level (the frontier is then the initial states')
        self.won: _Won | None = None
        # As in the serial loop, an invariant or witness met once is not evaluated again: not
        # the ones this shard met (its checker drops them), nor the ones any shard or the
        # initial states met (the coordinator names them with each level). A shard's first
        # hit in a level is its smallest index there; the coordinator keeps the smallest.
        self._checked = new_exploration(model)
        self._met: tuple[set[str], set[str]] = (set(), set())  # invariants, witnesses
        self._on_new = new_state_checker(model, self._checked)

    def _send(self, target: int, tag: str, payload: Any) -> None:
        self.inboxes[target].put((tag, self.level, self.me, payload))

    def _take_fixups(self, owner: int) -> tuple[bytes, bytes]:
        parts = self.fixups[owner]
        self.fixups[owner] = []
        if not parts:
            return b"", b""
        fps = np.concatenate([fps for fps, _ in parts])
        indices = np.concatenate([indices for _, indices in parts])
        return fps.tobytes(), indices.tobytes()

    def _apply_fixups(self, raw: tuple[bytes, bytes]) -> None:
        """Record the indices given to states this shard owns (below 0: cut, dropped)."""
        self.seen.number(
            np.frombuffer(raw[0], dtype=np.uint64), np.frombuffer(raw[1], dtype=np.int64)
        )

    def _flush(self) -> None:
        """Deliver every pending fix-up to its owner (before the seen set is read)."""
        for target in self.others:
            self._send(target, "fixups", self._take_fixups(target))
        for raw in self.mailbox.collect("fixups", self.level, self.others).values():
            self._apply_fixups(raw)
