"""Executable specification of the gated queue: admission dispatch decided by receiver credit.

Issue 6 "Check": the admission spec (:mod:`tent_spec.admission`) leaves the credit gate abstract
(``pick`` takes an eligible / blocked / rejected answer per owner as an argument). Here the
answer comes *from the credit state*: one sender process (its admission queue, its dispatch
gate and one sender endpoint per credit key) talks to one receiver (its allocator and one
receiver endpoint per key) over a lossy, duplicating, reordering network, and the receiver can
restart. The model checker then covers the combined system.

What is modelled (docs/design.md#gate-at-eligibility; docs/semantics.md#admission-queue,
docs/semantics.md#sender-ledger, docs/semantics.md#negotiation and
docs/semantics.md#receiver-allocator):

* **Queue.** Owners are admitted one at a time from a bounded workload, FIFO, under the
  outstanding-owner/byte limits. Each names a credit key (``1..keys``: a remote direct WRITE
  to the receiver's QoS class ``key - 1``) or ``0`` (an RDMA READ / local plan: never gated).
  A remote owner is pinned at admission to the sender's current receiver session (its
  snapshot). Lifecycle ``QUEUED → DISPATCHING → TERMINAL`` is the admission spec's own table
  (:data:`tent_spec.admission.OWNER_TRANSITIONS`).
* **Pick** (:meth:`GatedSpec.scan`): per owner in queue order, byte window (head of line stops
  the pick) → a key blocked earlier in this pick skips it → the gate: a snapshot that is not
  the key's current session → REJECTED (FAILED, nothing reserved); the key not ACTIVE, no
  update yet, or some resource short → BLOCKED (stays QUEUED in place, a credit stall, and the
  key's whole waiting work is stated to its sender endpoint, ``set_pending_demand``); else the
  whole charge ``(length, 1, 1)`` is reserved at once (a RESERVED token) and the owner
  dispatches.
* **Idle credit** (issue 10 item 8, :meth:`GatedSpec.return_idle`): when an owner leaves a key
  without using credit (a refused submit, a rejected or canceled stalled owner), the gate
  states what still waits and returns the key's available credit beyond its level (in flight
  plus waiting; all of it when it does not cover the head's charge); the key is then settled
  again at every pick until its entry changes (a grant for the old level may still arrive).
* **Settlement.** ``submit(owner, ok)``: accepted → the token commits (only while its entry
  lives: a fenced token's commit is InvalidEntry); refused → exact rollback, owner FAILED.
  Committed data ``land``\\ s at the receiver (live session only); ``complete`` ends the owner
  COMPLETED (landed) or FAILED (it can no longer land: its session died); completion never
  mints sender credit; the receiver's consumer ``release``\\ s landed data.
* **Control: credit protocol version 2, grant-ahead** (docs/credit_protocol.md#grant-ahead,
  docs/spec_review_gated.md). A sender endpoint states its **level** (its work in flight on
  the key plus what the gate said waits, in whole charges of the first waiting owner's while
  one waits) as ``demand = consumed + returned + level`` and reports only news: a rise, a
  return, or (a head waiting) a change of the level's unit at once, idle credit (returned with
  the report) once it lasted its hold, and nothing else but the refresh. The receiver takes a
  newer report's consumption as it is (a refused submit's rollback lowers it). The receiver
  keeps every key's unlanded credit topped up to its hold, in whole charges of its work, as
  its data lands (:mod:`._ahead`), serving due keys strictly first come from one waiting line
  (:mod:`._line`); an endpoint sends an update only with news (the grants or the retry hint
  moved), with the activation, to answer a repeated report, or on the refresh. A sender
  retransmits its capability offer while it awaits an activation. ``refresh_tick`` fires both
  refreshes at once: every receiver endpoint re-publishes its vector, every sender endpoint
  re-sends its report. Identity is per connection: every key has its own two bags.
* **Environment.** ``cancel`` (when configured) cancels a QUEUED owner (``queue.cancel`` and
  ``gate.forget``); like the faults it is off while recoverability is asked.
* **Faults.** ``duplicate`` / ``lose`` a message; ``receiver_restart``: a new session, fresh
  books, an empty line, both connections' bags gone, every sender endpoint disconnects
  (ACTIVE → STALE) and reconnects (offers again); the activation of the new session fences the
  old entry (FENCING until the old session's committed work completed, then ACTIVE).

Deliberately *not* modelled (covered elsewhere or orthogonal): deadlines, promotion and the MLU
drop (the admission spec), returns other than the gate's and the reports' idle returns and
sender restarts (the credit spec), the freshness TTL, retire, per-key caps
(``max_key_outstanding``), staging-internal owners, protocol version 1, legacy and disabled
modes (tested in ``tests/gate`` and ``tests/credit``). Epochs are always 1: without sender
restarts a receiver only opens one epoch per key and session, so the session alone is the
generation.

The spec is split by responsibility: ``_values`` (names, messages, the state, the
configuration), ``_ahead`` (grant-ahead arithmetic), ``_line`` (the receiver's positions, line
and top-ups), ``_core`` (policy hooks, the sender's level and report rules, the pick, the
returned-credit path, the queue and transport actions), ``_control`` (control messages and
faults), ``_properties`` (invariants and witnesses) and ``_spec`` (enumeration, encoding,
recovery); ``GatedSpec`` stacks them.

Sequence numbers are unbounded in the protocol; they are only compared, so
:meth:`GatedSpec.canonicalize` renumbers each (key, session) family by rank and ``max_seq`` is
only a state constraint.
"""

from ._spec import GatedSpec
from ._values import (
    ACTIVE,
    COMMITTED,
    EPOCH,
    FENCING,
    NEVER_STALLED,
    NONE,
    OFFER,
    PHASES,
    REPORT,
    RESERVED,
    RESOURCES,
    ROLLED_BACK,
    SETTLED,
    STALE,
    STALLED,
    TOKEN_STATES,
    TOKEN_TRANSITIONS,
    WAS_STALLED,
    Faults,
    GatedConfig,
    GatedState,
    Offer,
    Owner,
    OwnerSpec,
    ReceiverKey,
    Report,
    SenderKey,
    Update,
    charge_of,
)

__all__ = [
    "ACTIVE",
    "COMMITTED",
    "EPOCH",
    "FENCING",
    "NEVER_STALLED",
    "NONE",
    "OFFER",
    "PHASES",
    "REPORT",
    "RESERVED",
    "RESOURCES",
    "ROLLED_BACK",
    "SETTLED",
    "STALE",
    "STALLED",
    "TOKEN_STATES",
    "TOKEN_TRANSITIONS",
    "WAS_STALLED",
    "Faults",
    "GatedConfig",
    "GatedSpec",
    "GatedState",
    "Offer",
    "Owner",
    "OwnerSpec",
    "ReceiverKey",
    "Report",
    "SenderKey",
    "Update",
    "charge_of",
]
