"""The chart of a recorded implementation trace (``tent trace validate --html``): the
implementation's own events on the lifelines of its nodes, the first event the spec does not
allow marked, with the guard that refused it and what the spec allows that node there.

Lifelines: each sender (``sender:<peer>``, in spec order), the network, the receiver. A ``send``
is an arrow from its node into the network, a ``receive`` an arrow out of it (a per-node trace
records one end of each message only); data landing at the receiver is an arrow from its
sender; every other event is a box on its node. A step's state change is the node's logged
variables against that node's (and, at the receiver, that key's) previous ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tent_models.report._chart import ACCEPTED, REJECTED, Chart, Closing, Row
from tent_models.report._diff import mapping_changes
from tent_models.report._lifelines import DELIVER, LOCAL, SEND, Placement
from tent_models.trace._format import TraceFile
from tent_models.trace._validate import TraceReport

__all__ = ["MAX_EVENTS", "recorded_chart"]

MAX_EVENTS = 200
"""Events drawn at most: the ones up to the rejected event (or the first ones of a valid
trace); the report's text names the rest."""


def _size(amount: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if amount >= scale and amount % scale == 0:
            return f"{amount // scale} {unit}"
    return str(amount)


def _amounts(raw: object) -> str:
    """An amount map as the spec's vector: ``(1 MiB, 1, 0, 1)`` (bytes, request slots,
    staging slots, consumer slots), or ``""`` when there is none."""
    if not isinstance(raw, Mapping) or not raw:
        return ""
    values = [int(raw.get(r, raw.get(str(r), 0))) for r in range(1, 5)]
    return "(" + ", ".join([_size(values[0]), *map(str, values[1:])]) + ")"


def _message(msg: Mapping[str, Any]) -> str:
    kind = str(msg.get("type", "?"))
    short = {
        "ReceiverCreditUpdate": "Update",
        "SenderCreditUsage": "Usage",
        "CapabilityActivation": "Activation",
        "CapabilityOffer": "Offer",
    }.get(kind, kind)
    key = f"e{msg['epoch']}" if "epoch" in msg else ""
    seq = f"#{msg['sequence']}" if "sequence" in msg else ""
    parts = [short, key, seq, _amounts(msg.get("grants"))]
    for field, name in (("returned_totals", "ret"), ("pending_demand", "d")):
        if any((msg.get(field) or {}).values()):
            parts.append(f"{name}={_amounts(msg.get(field))}")
    return " ".join(p for p in parts if p)


def _place(event: Mapping[str, Any]) -> Placement:
    node, kind = str(event["n"]), str(event["k"])
    if kind == "send":
        return Placement(SEND, node, "network", _message(event.get("msg") or {}))
    if kind == "receive":
        return Placement(DELIVER, "network", node, _message(event.get("msg") or {}))
    if kind == "land" and node == "receiver":
        return Placement(
            DELIVER,
            f"sender:{event.get('peer')}",
            "receiver",
            f"data lands {_amounts(event.get('amounts'))}",
        )
    detail = _amounts(event.get("charge")) or _amounts(event.get("amounts"))
    if kind == "reserve":
        detail += f" → {event.get('result')}"
    return Placement(LOCAL, node, None, f"{kind} {detail}".strip())


class _Vector(str):
    """An amount vector already shown as text (``(1 MiB, 1, 0, 1)``): its repr is itself."""

    def __repr__(self) -> str:
        return str(self)


def _logged(raw: Mapping[str, Any]) -> dict[str, object]:
    """Logged variables as the chart shows them: amount maps as vectors."""
    return {k: _Vector(_amounts(v)) if isinstance(v, Mapping) else v for k, v in raw.items()}


def _event_text(event: Mapping[str, Any]) -> str:
    shown = {k: v for k, v in event.items() if k not in ("vars",)}
    return repr(shown)


def recorded_chart(trace: TraceFile, report: TraceReport, *, ident: str, title: str) -> Chart:
    """The chart of ``trace`` as ``report`` judged it (see the module docstring)."""
    everyone = (*(f"sender:{p}" for p in trace.senders), "network", "receiver")
    last = report.matched if not report.ok else len(trace.events) - 1
    first = max(0, last - MAX_EVENTS + 1) if not report.ok else 0
    shown = trace.events[first : min(last + 1, first + MAX_EVENTS)]
    previous: dict[tuple[Any, ...], Mapping[str, object]] = {}
    rows = []
    for offset, event in enumerate(trace.events[: first + len(shown)]):
        node = str(event["n"])
        key = (node, event.get("peer")) if node == "receiver" else (node,)
        logged = event.get("vars")
        changes: tuple[tuple[str, str, str], ...] = ()
        if isinstance(logged, Mapping):
            shown_vars = _logged(logged)
            changes = mapping_changes(previous.get(key), shown_vars)
            previous[key] = shown_vars
        if offset < first:
            continue
        place = _place(event)
        if place.source not in everyone or place.target not in (None, *everyone):
            place = Placement(LOCAL, "network", None, place.label)  # a key the header omits
        marked = not report.ok and offset == report.matched
        notes: tuple[str, ...] = ()
        if marked:
            notes = tuple(
                f"refused: {c.action}{tuple(c.args)!r}: {c.reason}" for c in report.candidates
            ) or ("no spec action produces this event",)
            if report.allowed:
                notes += ("the spec allows here: " + ", ".join(report.allowed),)
        rows.append(
            Row(
                index=offset,
                action=_event_text(event),
                placement=place,
                changes=changes,
                notes=notes,
                marked=marked,
            )
        )
    if report.ok:
        closing = Closing(
            kind=ACCEPTED,
            heading=(
                f"valid: {report.events} events, {report.hidden_steps} hidden spec step(s) inferred"
            ),
            lines=(
                ()
                if len(trace.events) <= MAX_EVENTS
                else (f"the first {MAX_EVENTS} of {len(trace.events)} events are drawn",)
            ),
        )
    else:
        lines = [report.detail] if report.detail else []
        lines.extend(f"refused: {c.action}{tuple(c.args)!r}: {c.reason}" for c in report.candidates)
        if report.allowed:
            lines.append("the spec allows this node here: " + ", ".join(report.allowed))
        if report.matched + 1 < len(trace.events):
            lines.append(f"events {report.matched + 1}..{len(trace.events) - 1} are not replayed")
        closing = Closing(
            kind=REJECTED,
            heading=(
                f"event {report.matched} ({report.event.get('n') if report.event else '?'} "
                f"{report.event.get('k') if report.event else '?'}): no spec step produces it"
            ),
            lines=tuple(lines),
        )
    # the trace's own nodes, the network, and the nodes its events reach (a per-node trace
    # leaves the others out: fewer lifelines, room for the labels)
    used = {n for r in rows for n in (r.placement.source, r.placement.target)}
    nodes = tuple(n for n in everyone if n in trace.nodes or n in used or n == "network")
    return Chart(
        ident=ident,
        title=title,
        lifelines=nodes,
        initial=(),
        rows=tuple(rows),
        closing=closing,
        unchanged="(no logged variable changed)",
    )
