"""Trace recording and trace validation against the credit spec (``tent trace validate``).

A trace is what an implementation can honestly emit: its own externally visible events, in the
order it saw them, with some of its variables. The format (``docs/traces.md``) is a CBOR sequence
(RFC 8742): one header item ``{"v": 1, ...}``, then one item per event ``{"n": node, "k": kind,
...fields, "vars": {...}}``. :class:`TraceRecorder` is the ``tent_credit`` trace sink that writes
it; :func:`validate` replays traces against :class:`~tent_spec.credit.CreditSpec`.

Validation is a search, because a real trace is partial:

1. Every event maps to the spec actions that could have produced it (a ``send`` of an update by
   the receiver → ``grant`` / ``push_update`` / ``publish_regressed``; a ``reserve`` →
   ``reserve(s, c)``; ...). An action whose event the trace does not record - another node's,
   the network's (loss), the transport's (failing fenced work), a timer's (staleness) - is
   *hidden*: between two events the validator tries up to ``hidden_depth`` hidden actions
   (iterative deepening: the fewest that explain the next event win).
2. The spec state is not observable in full, so the validator keeps every state consistent with
   the events so far (at most ``max_frontier``), and an event's logged variables prune it.
3. A duplicated message shows only as a second receive: it is matched by a retroactive
   ``duplicate`` (a copy that stayed in flight since the first delivery), within the budget.
4. Sequence numbers are the implementation's (they skip refreshes the spec never sends), so
   messages match by session, epoch and content; the spec's own sequence rules decide
   acceptance, and the logged variables after each event confirm it.
5. A refresh the receiver sends while the spec's reduction forbids one (an update of the live
   key is already in flight) carries the totals already in flight: it is accepted as a stutter.
   So is a repeated activation of the live key, sent or received (the receiver's answer to a
   retransmitted offer).

On rejection the :class:`TraceReport` names the longest matched prefix, the event no spec action
explains, a state before it, and for each candidate action the guard that failed
(:meth:`CreditSpec.explain`) or the logged variable that disagrees.
"""

from tent_models.trace._command import trace_cli
from tent_models.trace._format import (
    FORMAT_VERSION,
    TraceError,
    TraceFile,
    TraceRecorder,
    read_trace,
)
from tent_models.trace._validate import (
    CandidateVerdict,
    TraceReport,
    ValidationReport,
    validate,
    validate_trace,
)

__all__ = [
    "FORMAT_VERSION",
    "CandidateVerdict",
    "TraceError",
    "TraceFile",
    "TraceRecorder",
    "TraceReport",
    "ValidationReport",
    "read_trace",
    "trace_cli",
    "validate",
    "validate_trace",
]
