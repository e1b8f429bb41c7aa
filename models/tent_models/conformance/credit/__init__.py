"""Credit conformance: the real ``tent_credit`` endpoints against ``tent_spec.credit``.

:class:`CreditAdapter` runs one :class:`~tent_credit.CreditReceiver` (allocator, endpoints,
negotiation) and one :class:`~tent_credit.SenderEndpoint` per spec sender (ledger, negotiation,
demand), connected per sender by two :class:`~tent_credit.testing.FaultyChannel` s that carry the
real CBOR bytes of :mod:`tent_credit._wire`. Every fault is injected explicitly by a spec action
(``duplicate`` → ``duplicate_at``, ``lose`` → ``drop_at``, ``deliver`` of any message in flight →
``deliver_one``, i.e. reordering). The adapter is the harness around the endpoints: the transport
(it moves committed work and reports landings and failures) and the receiver's consumer.

The abstraction function (:meth:`CreditAdapter.abstract`) reads the implementation's public state
and the decoded bytes in flight and builds a :class:`~tent_spec.credit.CreditState`:

* ``Ledger`` ← the sender's key, epoch and ledger entry (``grant_total``, ``consumed``,
  ``returned``, last accepted sequence), its RESERVED tokens of the live entry, the last usage
  sequence it put on the wire, and its negotiation state (STALE ↔ ``STALE``).
* ``Peer.epoch`` and ``Books`` ← the allocator's current epoch and ``key_totals`` of every epoch it
  still holds (ACTIVE / FENCING / FENCED ↔ ``ACTIVE`` / ``FENCING`` / ``RECLAIMED``; ``reclaimed``
  = by return + by fence), the endpoint's pushed updates, its last accepted usage sequence and
  whether it is stalled on a demand.
* ``inflight`` ← the work the harness transport carries; bags ← the decoded channel contents.

Mapping decisions where the spec's modelling reductions differ from the implementation by
design (each keeps the same protocol step on both sides):

1. **Eager grants.** The spec's ``grant`` is an internal receiver step that may fire any time
   after a demand arrived; the implementation takes it at once, inside the call that made it
   possible (the usage that carries the demand, or the release / fence completion / return that
   frees capacity for a stalled sender). :class:`EagerGrantSpec` is the spec with that scheduler:
   after every step it fires ``grant`` for the acting sender, then for every stalled sender in
   the receiver's push order (``CreditReceiver.stalled_endpoints``: longest waiting first, read
   from the implementation before the step, issue 13), then for the rest in index order, while
   enabled. The spec leaves open which stalled sender is granted; the scheduler takes that
   choice from the implementation, and the lockstep still checks that every grant it fires is
   one the spec allows and that the implementation grants exactly those (the order policy
   itself is tested in ``tests/credit/test_push_order.py``). A standalone ``grant`` draw is
   then always disabled and has no implementation counterpart.
2. **Demand is a target.** The implementation reports an absolute target grant total; the spec a
   charge index ("grant one more charge"). For ``report_usage(s, d)`` the harness declares the
   waiting work with ``set_pending_demand`` so the target becomes ``granted + charge`` (the
   receiver's current grant of the key), i.e. exactly one more charge. The spec's demand of a
   message in flight is a ghost variable recorded per (session, epoch, sequence) when the
   sender emitted it (the wire carries the target). Targets never move down within an epoch and
   a receiver never grants a demand twice, so a report that would drop or repeat a demand the
   receiver still holds (it is stalled) is outside the implementation's behaviours:
   :meth:`CreditAdapter.supported` says so and the drivers do not draw it.
3. **Refreshes.** The receiver answers an offer, a blocked demand (``retry_after_us``) and every
   grant with an update. An update that carries new totals is the spec's grant publish and goes
   on the wire; one that carries the totals this endpoint sent last is a refresh, which the spec
   sends only as ``push_update``: outside ``push_update`` the harness withholds it (it never
   reaches the wire). Its sequence number is recorded, and the abstraction maps the receiver's
   sequences to the spec's by subtracting the withheld ones below them (sequences are only ever
   compared, so this rank mapping is exact).
4. **push_update** delivers the heartbeats the sender emitted (the receiver answers each with a
   refresh) or, when none is pending, advances the receiver endpoint's refresh timer. It needs
   the endpoint to have negotiated a version (an offer arrived): the implementation does not push
   to a connection that has not offered yet.
5. **send_activation** is the connection handshake: the harness delivers the sender's
   capability offer (not in the spec's alphabet) to the receiver endpoint, which answers with the
   activation (on the wire) and a refresh (withheld, rule 3).
6. **Initial state.** Setup runs that handshake for every sender and delivers the activation, so
   the implementation starts where the spec does: session 1, every sender active at epoch 1
   with no grant and nothing in flight.
7. **Staleness** is the TTL: ``become_stale`` advances the sender's clock past
   ``freshness_ttl_ms`` and calls ``handle_timer``. The spec's ``REVIVED`` mark and
   ``stale_at`` are history variables the harness keeps (stale since the entry began, and the
   sequence then). Only an ACTIVE sender ages: while a sender is FENCING (rule 9) ``reserve``
   and ``become_stale`` are not drawn.
8. **Restarts.** ``sender_restart`` builds a new :class:`SenderEndpoint` (a new process: its
   RESERVED tokens die, its committed work stays with the transport) and ``accept`` s a new
   connection (the receiver bumps the epoch and fences the old one); the old connection's
   receiver→sender bytes are gone, its sender→receiver bytes may still arrive.
   ``receiver_restart`` builds a new :class:`CreditReceiver` with the next session id and
   accepts every sender again; bytes in flight to it and its in-flight work are gone (the
   transport fails that work, which completes it at a live sender).
9. **Sender fencing.** After an activation of a new session, the implementation's sender stays
   FENCING (no reservations) until its work of the old session completed; the spec's sender
   reserves at once. The harness fails dead-session work at the receiver restart, so this only
   shows for work committed on the dead session after it, until ``fail_inflight``.
10. **Completion.** ``data_lands`` is the receiver's write admission (``admit_write``, which
    counts the landing) and completes the token at the sender; ``fail_inflight`` only completes
    it. Neither gives the sender credit. A refused admission is a divergence: every write the
    spec lets land is one an honest sender made within its credit.
11. **Faults and bounds.** The fault counters are erased by :meth:`CreditAdapter.project`
    (the harness injects faults; the implementation cannot count them). The run uses
    :func:`conformance_bounds`: the model's sizes with fault budgets, message and sequence caps
    lifted, so that a bound never disables a step the implementation takes.

12. **Session order.** The spec orders receiver sessions (a restart mints ``session + 1``) and
    its sender ignores an activation of an older session; so does the implementation's, since
    a receiver mints a larger session id on every restart (``SessionId``). These walks found
    the bug this closes: a late activation of a dead session used to move the sender back
    there (``LATE_DEAD_SESSION_ACTIVATION``, and a variant where the sender never saw the
    older session at all).

A spec guard that is false maps to the implementation's refusal in
:meth:`CreditAdapter.refusal`: a typed error (commit/rollback of a token whose entry was
fenced → ``InvalidEntry``; a return without an entry → ``InvalidEntry``, beyond the available
credit → ``InsufficientCredit``; landing in a reclaimed epoch, releasing or completing the fence
of an epoch in the wrong state → ``InvalidEntry``) or a documented no-op (a blocked reserve
answers backpressure and changes nothing). Guards that are model reductions, bounds, or choices
of the sender's own policy have no counterpart and are not performed.

How to read the package (each module opens with what it holds):

* ``_model``: the spec side: :func:`conformance_bounds`, :data:`CONFORMANCE_BOUNDS` and
  :class:`EagerGrantSpec` (rules 1 and 11).
* ``_harness``: the channels, the transport's work and the per-sender slots.
* ``_core``: the adapter's state, the handshake and the wire ↔ spec message mapping.
* ``_drivers``: one driver per spec action (``perform``).
* ``_adapter``: :class:`CreditAdapter`: refusals, which steps the drivers take, the
  abstraction function.
* ``_runners``: :class:`CreditRun`, :func:`run_credit`, the seeded walk and
  :func:`export_regression`.
"""

from __future__ import annotations

from tent_models.conformance.credit._adapter import CreditAdapter
from tent_models.conformance.credit._model import (
    CONFORMANCE_BOUNDS,
    EagerGrantSpec,
    conformance_bounds,
)

# Re-exported with ``as`` (not in ``__all__``): the settings the single module used to hold.
from tent_models.conformance.credit._model import FRESHNESS_TTL_MS as FRESHNESS_TTL_MS
from tent_models.conformance.credit._model import REFRESH_INTERVAL_NS as REFRESH_INTERVAL_NS
from tent_models.conformance.credit._model import RESOURCES as RESOURCES
from tent_models.conformance.credit._model import USAGE_INTERVAL_NS as USAGE_INTERVAL_NS
from tent_models.conformance.credit._runners import WALK_WEIGHTS as WALK_WEIGHTS
from tent_models.conformance.credit._runners import (
    CreditRun,
    credit_lockstep,
    export_regression,
    run_credit,
    run_credit_conformance,
    weighted_choice,
)

__all__ = [
    "CONFORMANCE_BOUNDS",
    "CreditAdapter",
    "CreditRun",
    "EagerGrantSpec",
    "conformance_bounds",
    "credit_lockstep",
    "export_regression",
    "run_credit",
    "run_credit_conformance",
    "weighted_choice",
]
