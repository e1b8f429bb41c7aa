"""What every part of :class:`~tent_sched._queue.AdmissionQueue` shares: its state.

The admission queue is one class over private mixins split by responsibility: this base (the
per-owner record ``_Owner``, construction and its validation, and the lifecycle helpers:
re-entrancy guard, owner lookup, the transition through :data:`OWNER_TRANSITIONS`, capacity
release), :mod:`._queue_admit` (admission), :mod:`._queue_pick` (the dispatch pick) and
:mod:`._queue_queries` (status and statistics); :mod:`._queue` assembles them and holds the
configuration views, hooks, completion and cancel. The helpers more than one mixin calls live here
so that each mixin reads only this base, never another mixin. The data structure is described in
:mod:`._queue`'s docstring.
"""

from __future__ import annotations

import logging
import math
from operator import attrgetter

from ._describe import describe
from ._queue_values import (
    OWNER_TRANSITIONS,
    TERMINAL_STATUSES,
    U64_MAX,
    DegradationHook,
    OwnerKind,
    OwnerState,
    OwnerView,
    QueueLimits,
    TaskStatus,
)
from .errors import ConfigError, InvalidArgument, InvalidEntry


class _Owner:
    """Mutable per-owner record; the immutable part is ``view``."""

    __slots__ = ("batch_token", "derived_ids", "key", "state", "status", "view")

    def __init__(self, view: OwnerView, batch_token: int, derived_ids: tuple[int, ...], key: int):
        self.view = view
        self.batch_token = batch_token
        self.derived_ids = derived_ids
        self.key = key
        self.state = OwnerState.QUEUED
        self.status = TaskStatus.PENDING


_ORDER_KEY = attrgetter("key")
_log = logging.getLogger(__name__)
_COMPACT_MIN = 64  # below this many dead slots, compaction is not worth a pass


class _QueueState:
    """The state of an :class:`AdmissionQueue` and the helpers its parts share (module
    docstring); not used on its own."""

    def __init__(
        self,
        limits: QueueLimits,
        *,
        deadline_aware: bool = False,
        promotion_slack_ns: int = 0,
        mlu_local_threshold: float = 0.0,
        allow_aggressive_threshold: bool = False,
        max_dispatch_bytes: int | None = None,
    ) -> None:
        """Create an empty queue.

        ``mlu_local_threshold`` (θ): the drop acts only when θ is positive (0, the default, or
        a negative θ: off); 0 < θ < 1 is accepted, as Deadline Scheduling "Known Limits" says
        (it cancels requests the predictor expects to make their window), and logged as a
        warning (``logging``, under ``tent_sched``) unless ``allow_aggressive_threshold=True``
        acknowledges it. ``max_dispatch_bytes``: when given, a longer owner is refused at
        submit (it could never fit a dispatch window). Promotion and drop act only with
        ``deadline_aware``.

        Raises ConfigError on any invalid argument (wrong type, non-finite θ, zero
        ``max_dispatch_bytes``).
        """
        if not isinstance(limits, QueueLimits):
            raise ConfigError(f"limits must be QueueLimits, got {type(limits).__name__}")
        for name, flag in (
            ("deadline_aware", deadline_aware),
            ("allow_aggressive_threshold", allow_aggressive_threshold),
        ):
            if type(flag) is not bool:
                raise ConfigError(f"{name} must be a bool, got {describe(flag)}")
        if type(promotion_slack_ns) is not int or not 0 <= promotion_slack_ns <= U64_MAX:
            raise ConfigError(
                f"promotion_slack_ns must be a u64 int, got {describe(promotion_slack_ns)}"
            )
        theta = mlu_local_threshold
        if type(theta) not in (int, float) or not math.isfinite(theta):
            raise ConfigError(f"mlu_local_threshold must be a finite number, got {describe(theta)}")
        if max_dispatch_bytes is not None and (
            type(max_dispatch_bytes) is not int or not 1 <= max_dispatch_bytes <= U64_MAX
        ):
            raise ConfigError(
                f"max_dispatch_bytes must be a u64 int > 0, got {describe(max_dispatch_bytes)}"
            )

        if 0 < theta < 1.0 and not allow_aggressive_threshold:
            _log.warning(
                "mlu_local_threshold %s < 1.0 cancels requests the predictor expects to make "
                "their deadline; 1.0 is the floor of the useful range (set "
                "allow_aggressive_threshold to acknowledge it)",
                theta,
            )

        self._limits = limits
        self._deadline_aware = deadline_aware
        self._promotion_slack_ns = promotion_slack_ns if deadline_aware else 0
        self._theta = float(theta)
        self._drop_configured = deadline_aware and theta > 0  # §2: + a bandwidth provider
        self._max_dispatch_bytes = max_dispatch_bytes
        self._user_owner_limit = limits.max_outstanding_owners - limits.staging_owner_reserve
        self._user_byte_limit = limits.max_outstanding_bytes - limits.staging_byte_reserve

        self._entries: list[_Owner] = []  # sorted by key from _head; see _queue's docstring
        self._head = 0
        self._queued = 0
        self._owners: dict[int, _Owner] = {}
        self._public_ids: dict[tuple[int, int], int] = {}
        self._batches: dict[int, list[int]] = {}
        self._hooks: dict[int, DegradationHook] = {}
        self._next_hook = 0
        self._next_owner_id = 1  # §2: from 1, monotonic, never reused
        self._next_seq = 0
        self._picking = False

        self._outstanding_owners = 0
        self._outstanding_bytes = 0
        self._outstanding_user_owners = 0
        self._outstanding_user_bytes = 0
        self._dispatching_owners = 0
        self._dispatching_bytes = 0
        self._admitted = 0
        self._dispatched = 0
        self._dropped = 0
        self._canceled = 0
        self._rejected = 0
        self._blocked = 0
        self._completions: dict[TaskStatus, int] = dict.fromkeys(TERMINAL_STATUSES, 0)

    # ------------------------------------------------------------------ shared helpers

    def _check_not_picking(self, call: str) -> None:
        if self._picking:
            raise InvalidArgument(f"{call} called from an eligibility callback during a pick")

    def _lookup(self, owner_id: int) -> _Owner:
        try:
            return self._owners[owner_id]
        except KeyError:
            raise InvalidEntry(f"unknown owner {owner_id}") from None

    @staticmethod
    def _transition(owner: _Owner, event: str, status: TaskStatus) -> None:
        """Apply ``event`` through :data:`OWNER_TRANSITIONS`; a missing key raises IE."""
        try:
            state = OWNER_TRANSITIONS[(owner.state, event)]
        except KeyError:
            raise InvalidEntry(
                f"owner {owner.view.owner_id}: cannot {event} in state {owner.state.name}"
                + (f" ({owner.status.name})" if owner.state is OwnerState.TERMINAL else "")
            ) from None
        owner.state = state
        owner.status = status if state is OwnerState.TERMINAL else TaskStatus.PENDING

    def _release(self, owner: _Owner) -> None:
        """Give back the outstanding capacity of an owner that just became terminal."""
        view = owner.view
        self._outstanding_owners -= 1
        self._outstanding_bytes -= view.length
        if view.kind is OwnerKind.USER:
            self._outstanding_user_owners -= 1
            self._outstanding_user_bytes -= view.length
