"""Executable specification of the admission queue's owner states.

docs/semantics.md#admission-queue and Deadline Scheduling "Admission Queue".

A small, pure state machine written for review. Every action is a guard plus an effect on a frozen
:class:`AdmissionState`; every invariant is a named predicate citing the rule it encodes. The module
imports nothing from the implementation (docs/design.md#principle-2): only the stdlib and the spec's
own :func:`tent_spec.mlu.deadline_mlu`.

What is modelled, per owner: kind, length, deadline, degradation eligibility, credit gate key and
the lifecycle ``QUEUED → DISPATCHING → TERMINAL(status)`` (:data:`OWNER_TRANSITIONS`). Queue-wide:
outstanding owners/bytes (total and user), ``dispatching_bytes``, the EDF/FIFO queue order, owner
ids from 1 that are never reused, a discrete clock and the bandwidth estimate. The credit gate is
abstract: ``pick`` takes one explicit answer (eligible / blocked / rejected) for every gated owner
the scan consults, so a conformance runner can replay the same answers on the implementation.

Deliberately *not* modelled: public task ids, derived ids and batch slots (a mapping layer on top
of owners, orthogonal to their lifecycle), the degradation hook (a notification without state) and
the gate's reservation tokens (the credit spec owns them).

Actions (explicit arguments, enumerated from the configuration's bounds):

* ``admit(batch, owner_specs)``: one submit of the configured workload, all or nothing.
* ``pick(max_owners, max_bytes, eligibility)``: one dispatch pass; ``eligibility`` lists
  ``(owner_id, answer)`` for every gated owner the scan consults, in scan order.
* ``complete(owner_id, status)``, ``cancel(owner_id)``, ``retire(batch)``.
* ``advance_time(dt_ns)`` and ``set_bandwidth(bandwidth_bps)`` (``None`` = no provider).

How to read the package: ``_state`` (the lifecycle table, the values and the configuration),
``_actions`` (every action as guard + effect), ``_invariants`` (the safety properties and
witnesses), ``_model`` (:class:`AdmissionSpec`: successors, ``apply`` / ``explain``, encoding).
"""

from tent_spec.admission._model import AdmissionSpec
from tent_spec.admission._state import (
    BLOCKED,
    CANCELED,
    COMPLETED,
    DISPATCHING,
    ELIGIBLE,
    FAILED,
    GATE_ANSWERS,
    INVALID,
    KINDS,
    NO_DEADLINE_KEY,
    OWNER_EVENTS,
    OWNER_STATES,
    OWNER_TRANSITIONS,
    QUEUED,
    REJECTED,
    STAGING_INTERNAL,
    STOP_END_OF_QUEUE,
    STOP_HEAD_OF_LINE,
    STOP_OWNER_BUDGET,
    STOP_REASONS,
    STOP_ZERO_BUDGET,
    TERMINAL,
    TERMINAL_STATUSES,
    TIMEOUT,
    USER,
    AdmissionConfig,
    AdmissionState,
    Invariant,
    Owner,
    OwnerSpec,
    PickRecord,
    SpecConfigError,
    Step,
    Submit,
    Witness,
)

__all__ = [
    "BLOCKED",
    "CANCELED",
    "COMPLETED",
    "DISPATCHING",
    "ELIGIBLE",
    "FAILED",
    "GATE_ANSWERS",
    "INVALID",
    "KINDS",
    "NO_DEADLINE_KEY",
    "OWNER_EVENTS",
    "OWNER_STATES",
    "OWNER_TRANSITIONS",
    "QUEUED",
    "REJECTED",
    "STAGING_INTERNAL",
    "STOP_END_OF_QUEUE",
    "STOP_HEAD_OF_LINE",
    "STOP_OWNER_BUDGET",
    "STOP_REASONS",
    "STOP_ZERO_BUDGET",
    "TERMINAL",
    "TERMINAL_STATUSES",
    "TIMEOUT",
    "USER",
    "AdmissionConfig",
    "AdmissionSpec",
    "AdmissionState",
    "Invariant",
    "Owner",
    "OwnerSpec",
    "PickRecord",
    "SpecConfigError",
    "Step",
    "Submit",
    "Witness",
]
