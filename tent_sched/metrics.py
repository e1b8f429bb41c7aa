"""Prometheus metrics of deadline scheduling (docs/semantics.md#scheduling-metrics).

Two metrics, defined in a :class:`~prometheus_client.CollectorRegistry` the caller passes in
(never the process-global one):

* ``tent_deadline_mlu_permille`` (histogram): the *measured* MLU at completion, × 1000:
  submit-to-completion latency over the window the transfer had at submit. 1000 is the met/missed
  boundary. Only transfers that reach COMPLETED with a deadline still ahead at submit.
* ``tent_deadline_infeasible_total`` (counter): transfers whose deadline had already passed at
  submit, on COMPLETED or FAILED; kept apart so they are not read as high-MLU samples.

A dropped owner (CANCELED) produces neither: it never ran.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from ._describe import describe
from ._queue import TERMINAL_STATUSES, TaskStatus
from .errors import InvalidArgument, InvalidEntry

__all__ = ["MLU_PERMILLE_BUCKETS", "SchedMetrics"]

MLU_PERMILLE_BUCKETS: tuple[float, ...] = (100, 250, 500, 750, 900, 1000, 1250, 1500, 2000, 5000)
"""The reference's histogram buckets, in permille of the window
(docs/semantics.md#scheduling-metrics)."""

_INFEASIBLE_COUNTED = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED})


class SchedMetrics:
    """The deadline metrics of one engine, registered in ``registry``."""

    __slots__ = ("_infeasible", "_mlu_permille")

    def __init__(self, registry: CollectorRegistry) -> None:
        """Define both metrics in ``registry``.

        Raises ``InvalidArgument`` if ``registry`` is not a ``CollectorRegistry`` and
        ``InvalidEntry`` if it already holds metrics of these names; the registry is then
        unchanged (a half-registered pair is unregistered again).
        """
        if not isinstance(registry, CollectorRegistry):
            raise InvalidArgument(f"registry must be a CollectorRegistry, got {describe(registry)}")
        mlu_permille = Histogram(
            "tent_deadline_mlu_permille",
            "Measured MLU at completion x 1000: submit-to-completion latency over the window "
            "at submit, for COMPLETED transfers with a deadline still ahead at submit",
            buckets=MLU_PERMILLE_BUCKETS,
            registry=None,
        )
        infeasible = Counter(
            "tent_deadline_infeasible",
            "Transfers whose deadline had already passed at submit (COMPLETED or FAILED)",
            registry=None,
        )
        try:
            registry.register(mlu_permille)
        except ValueError as exc:
            raise InvalidEntry(f"deadline metrics already registered: {exc}") from None
        try:
            registry.register(infeasible)
        except ValueError as exc:
            registry.unregister(mlu_permille)
            raise InvalidEntry(f"deadline metrics already registered: {exc}") from None
        self._mlu_permille = mlu_permille
        self._infeasible = infeasible

    def record_completion(
        self, *, status: TaskStatus, deadline_ns: int, submit_ns: int, complete_ns: int
    ) -> None:
        """Record one transfer that reached a terminal ``status`` at ``complete_ns``.

        1. No deadline (``deadline_ns == 0``) → nothing.
        2. Deadline already past at submit (``deadline_ns <= submit_ns``): COMPLETED or FAILED
           → ``tent_deadline_infeasible_total`` + 1; any other status → nothing.
        3. Deadline ahead at submit: COMPLETED → observe ``int(mlu × 1000)`` with
           ``mlu = (complete_ns - submit_ns) / (deadline_ns - submit_ns)``; any other status
           (FAILED, TIMEOUT, a dropped or cancelled owner's CANCELED, INVALID) → nothing.

        Raises ``InvalidArgument`` for a non-terminal or non-``TaskStatus`` status, a timestamp
        that is not an int >= 0, or ``complete_ns < submit_ns``; nothing is recorded.
        """
        if not isinstance(status, TaskStatus) or status not in TERMINAL_STATUSES:
            raise InvalidArgument(f"status must be a terminal TaskStatus, got {describe(status)}")
        for name, value in (
            ("deadline_ns", deadline_ns),
            ("submit_ns", submit_ns),
            ("complete_ns", complete_ns),
        ):
            if type(value) is not int or value < 0:
                raise InvalidArgument(f"{name} must be an int >= 0, got {describe(value)}")
        if complete_ns < submit_ns:
            raise InvalidArgument(f"complete_ns {complete_ns} is before submit_ns {submit_ns}")
        if deadline_ns == 0:
            return
        if deadline_ns <= submit_ns:
            if status in _INFEASIBLE_COUNTED:
                self._infeasible.inc()
            return
        if status is TaskStatus.COMPLETED:
            mlu = (complete_ns - submit_ns) / (deadline_ns - submit_ns)
            self._mlu_permille.observe(int(mlu * 1000))
