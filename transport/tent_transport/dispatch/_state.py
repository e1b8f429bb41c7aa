"""What the dispatch core keeps: its construction, its registries, the checks every call shares.

:class:`_CoreState` validates the configuration and the gate and builds the core's parts (the
:class:`RailSet`, the admission queue, the metrics, the token :class:`Settlement`) and the
registries of transfers, events, drops and hooks; it holds the argument checks the public calls
share (``_check_now``, ``_record``) and the queue's degradation hook. :class:`DispatchCore` is
this base under mixins split by responsibility, each over the one before: :mod:`._completion`
(a slice posted or ended, a transfer settled as it ends), :mod:`._pass` (the dispatch pass:
refill, gate eligibility, hand-off, post), :mod:`._submit` (submit and admission),
:mod:`._cancel` (cancel and a dead peer), and :mod:`._core` (views, progress, timers, queries).
The state lives here, below all of them, because every part reads it.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from tent_credit import CreditMode, DispatchGate, EndpointEvent, RejectReason
from tent_credit.metrics import GateCollector
from tent_sched import AdmissionQueue, MeterParams, OwnerView
from tent_sched import errors as sched_errors
from tent_sched.metrics import SchedMetrics

from ..config import EngineConfig
from ..devices._base import U64_MAX, Device
from ..errors import ConfigError, InvalidArgument, InvalidEntry
from ._rails import RailSet
from ._records import DropHook, SliceCutter, TransferRecord, translate
from ._settle import Settlement
from ._types import EndReason, TransferEvent


class _CoreState:
    """The state of a :class:`DispatchCore` (module docstring)."""

    def __init__(
        self,
        config: EngineConfig,
        rails: Sequence[Device],
        *,
        gate: DispatchGate | None = None,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        """Build the core over ``rails`` (one ``NicDevice`` each, seeded from the link speed).

        Raises ConfigError if ``receiver_credit`` is enabled without a gate or the gate's mode
        differs from the configured one; InvalidArgument for no rails, a non-Device, duplicate
        rail names, or a registry that already holds the deadline metrics.
        """
        if not isinstance(config, EngineConfig):
            raise InvalidArgument(f"config must be an EngineConfig, got {type(config).__name__}")
        credit = config.receiver_credit
        if gate is not None and not isinstance(gate, DispatchGate):
            raise InvalidArgument(f"gate must be a DispatchGate, got {type(gate).__name__}")
        if credit.enabled and gate is None:
            raise ConfigError("receiver_credit/enabled: the dispatch core needs a DispatchGate")
        if gate is not None and gate.mode is not credit.credit_mode:
            raise ConfigError(
                f"the gate's mode {gate.mode.value} differs from receiver_credit/mode "
                f"{credit.credit_mode.value}"
            )
        sched = config.sched
        try:
            params = MeterParams.from_config(sched.rdma)
            self._rails = RailSet(
                rails,
                params,
                max_qp_wr=sched.rdma.max_qp_wr,
                arbitration=sched.rdma.deadline_bw_arbitration,
            )
        except sched_errors.SchedError as exc:
            raise translate(exc) from exc
        self._config = config
        self._gate = gate
        self._credit_active = gate is not None and gate.mode is not CreditMode.DISABLED
        self._queue: AdmissionQueue | None = (
            sched.make_queue() if sched.enable_runtime_queue else None
        )
        self._metrics: SchedMetrics | None = None
        if metrics_registry is not None:
            try:
                self._metrics = SchedMetrics(metrics_registry)
            except sched_errors.SchedError as exc:
                raise translate(exc) from exc
            if gate is not None:
                GateCollector(metrics_registry, gate)
        if self._queue is not None:
            self._queue.add_degradation_hook(self._note_drop)

        self._settle = Settlement(gate)
        self._records: dict[int, TransferRecord] = {}
        self._by_owner: dict[int, TransferRecord] = {}
        self._batch_live: dict[int, int] = {}
        self._events: list[TransferEvent] = []
        self._endpoint_events: list[EndpointEvent] = []
        self._drop_mlu: dict[int, float] = {}
        self._reject_reason: dict[int, RejectReason] = {}
        self._hooks: dict[int, DropHook] = {}
        self._next_hook = 0
        self._next_transfer = 1
        self._next_batch = 1
        self._ids = SliceCutter()
        self._last_now = 0
        self._last_progress_ns = 0
        self._queued = 0
        self._dispatched = 0
        self._window_owners = 0
        self._window_bytes = 0
        self._submitted = self._bypassed = self._merged = 0
        # A refill that dispatched, dropped and rejected nothing leaves what it read here
        # (``_pass.py``): the next refill with the same inputs, before the clock can matter,
        # is skipped (docs/gate.md#quiet-passes). ``_quiet_skips`` counts the skipped ones.
        # (key, until_ns, whether the key holds the dispatch window)
        self._quiet: tuple[tuple[object, ...], int | None, bool] | None = None
        self._quiet_skips = 0
        self._ended: dict[EndReason, int] = dict.fromkeys(EndReason, 0)

    def _check_now(self, now_ns: int) -> None:
        if type(now_ns) is not int or not 0 <= now_ns <= U64_MAX:
            raise InvalidArgument(f"now_ns must be a u64 int, got {now_ns!r}")
        if now_ns < self._last_now:
            raise InvalidArgument(f"now_ns {now_ns} is before the last call's {self._last_now}")
        self._last_now = now_ns

    def _record(self, transfer_id: int) -> TransferRecord:
        if type(transfer_id) is not int:
            raise InvalidArgument(f"transfer id must be an int, got {transfer_id!r}")
        record = self._records.get(transfer_id)
        if record is None:
            raise InvalidEntry(f"unknown or already reported transfer {transfer_id}")
        return record

    def _note_drop(self, owner: OwnerView, mlu: float) -> None:
        self._drop_mlu[owner.owner_id] = mlu
