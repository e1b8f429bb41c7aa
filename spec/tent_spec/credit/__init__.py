"""Executable specification of TENT's receiver-advertised credits: epochs, fencing, recovery.

One receiver, ``N`` interchangeable senders, ``R`` resources, a lossy reordering network. The
model follows the protocol as the implementation realises it (docs/design.md#protocol-decisions,
docs/semantics.md#sender-ledger, docs/semantics.md#negotiation and
docs/semantics.md#receiver-allocator):

* **Receiver push.** The receiver carves grants from free capacity on a sender's demand
  (``grant``) and publishes the *full cumulative* grant vector of the key in an ``Update``
  (``push_update``; the refresh/heartbeat timer publishes the same way, under a new sequence).
* **Sender pull.** The sender reports its cumulative ``returned`` totals and a pending demand in a
  ``Usage`` report (``report_usage``); the receiver reclaims ``returned - already reclaimed``.
* **Keys and generations.** A sender's ledger entry is keyed by ``(receiver session, epoch)``.
  The receiver chooses epochs: it bumps a sender's epoch when that sender reconnects
  (``sender_restart``) and a receiver restart mints a new session (``receiver_restart``); the
  sender learns both from an ``Activation`` and starts a fresh entry (the epoch fence).
* **Fencing.** An old epoch's outstanding credit is reclaimed only after its in-flight work has
  landed or failed (``reclaim_after_fence``); data that landed is freed only by the receiver's own
  consumer (``consumer_release``), never by a sender's message.

A state is a :class:`CreditState` of frozen ``NamedTuple`` values. Everything about one sender -
its ledger, the receiver's books for its epochs, its in-flight work and the messages to and from
it - lives in one :class:`Peer`, so senders are interchangeable slots (symmetry reduction sorts
them) and no component names another sender.

Actions are guard + effect. Every action takes explicit arguments (sender index, message value,
charge index, in-flight item), so a conformance runner can replay ``(action, args)`` on the
implementation. :meth:`CreditSpec.explain` names the guard that fails.

What the bounds (:class:`CreditBounds`) leave out, honestly:

1. ``max_grant_total``: cumulative grants per (sender, epoch, resource) stop growing there, so
   grant/consume/release cycles beyond it are not explored (the arithmetic is the same at any
   size; overflow is the implementation's checked u64 arithmetic, tested there).
2. ``max_epoch`` / ``max_sender_restarts`` / ``max_receiver_restarts``: at most that many
   generations; a third restart behaves like the second (nothing carries over but fenced books).
3. ``max_messages``: at most that many messages in flight in total. A send that would exceed it
   is disabled (not dropped), so the model never loses a message silently. Sending an exact copy
   of a message that is still in flight is not a separate action: that is ``duplicate``.
4. ``max_duplications`` / ``max_losses`` / ``max_stale`` / ``max_regressions`` and the restart
   budgets are per-kind fault budgets; ``max_faults`` (optional) caps all kinds together, so
   a run combines at most that many faults (every pair is still explored when it is 2).
5. ``max_tokens``: live RESERVED tokens per sender (the sender's dispatch window).
6. Sequence numbers are unbounded in the protocol. They are only ever compared, and a new one is
   always larger than every live one, so :meth:`CreditSpec.canonicalize` renumbers them by rank
   per key (data independence); ``max_seq`` is the state constraint that keeps the model finite
   even without that reduction.
7. Consumer release frees all landed data of an epoch at once; a partial release is the same
   arithmetic on smaller numbers.
8. ``consumed_totals`` of a usage report are omitted: no receiver decision depends on them
   (they feed metrics). Tokens are identified by their charge (a multiset), not by a handle.

How to read the package (each module opens with what it holds; a reviewer reads them in this
order, the fast path last or never):

* ``_state``: the state, the messages and :class:`CreditBounds`.
* ``_table``: the actions, their arities, the faults, and :data:`GUARDS` (every guard as a
  list of named conjuncts).
* ``_core``: construction, the initial state, available credit and free capacity.
* ``_actions``: one method per guard conjunct and one effect per action, citing their rules.
* ``_invariants``: the invariants with the RFC sentences they encode, the witnesses, recovery.
* ``_model``: :class:`ReadableCreditSpec`, the whole ``SpecModel`` evaluated directly
  (enumeration, ``apply`` / ``explain``, the plain encoding and the symmetry reduction).
* ``_fastpath``: :class:`CreditSpec`, the same model with its hot methods memoised and the
  checker's incremental fingerprint (speed only; ``tests/models/test_spec_fastpath.py`` proves
  it equal to direct evaluation).
"""

# Re-exported with ``as`` (not in ``__all__``): private helpers that the spec's extensions
# (``tent_spec.variants``, ``tent_spec.credit_adversarial``) and the fast-path tests use.
from tent_spec.credit._fastpath import CreditSpec
from tent_spec.credit._model import ReadableCreditSpec
from tent_spec.credit._model import _pack_peer as _pack_peer
from tent_spec.credit._model import _renumber as _renumber
from tent_spec.credit._state import (
    ACTIVATION,
    ACTIVE,
    FENCING,
    FRESH,
    FRESHNESS_NAMES,
    RECLAIMED,
    REVIVED,
    STALE,
    STATUS_NAMES,
    UPDATE,
    USAGE,
    Activation,
    Bag,
    Books,
    CreditBounds,
    CreditState,
    Faults,
    InFlight,
    InvalidBounds,
    Ledger,
    Message,
    Peer,
    SpecInvariant,
    SpecStep,
    SpecWitness,
    Update,
    Usage,
    Vec,
)
from tent_spec.credit._state import _in_flight_messages as _in_flight_messages
from tent_spec.credit._state import _insert_sorted as _insert_sorted
from tent_spec.credit._state import _remove_one as _remove_one
from tent_spec.credit._state import _vadd as _vadd
from tent_spec.credit._state import _vle as _vle
from tent_spec.credit._state import _vsub as _vsub
from tent_spec.credit._table import _ACTIONS as _ACTIONS
from tent_spec.credit._table import _FAULTS as _FAULTS
from tent_spec.credit._table import (
    BOUND,
    BUDGET,
    GUARD_KINDS,
    GUARDS,
    REDUCTION,
    RULE,
    Guard,
)

__all__ = [
    "ACTIVATION",
    "ACTIVE",
    "BOUND",
    "BUDGET",
    "FENCING",
    "FRESH",
    "FRESHNESS_NAMES",
    "GUARDS",
    "GUARD_KINDS",
    "RECLAIMED",
    "REDUCTION",
    "REVIVED",
    "RULE",
    "STALE",
    "STATUS_NAMES",
    "UPDATE",
    "USAGE",
    "Activation",
    "Bag",
    "Books",
    "CreditBounds",
    "CreditSpec",
    "CreditState",
    "Faults",
    "Guard",
    "InFlight",
    "InvalidBounds",
    "Ledger",
    "Message",
    "Peer",
    "ReadableCreditSpec",
    "SpecInvariant",
    "SpecStep",
    "SpecWitness",
    "Update",
    "Usage",
    "Vec",
]
