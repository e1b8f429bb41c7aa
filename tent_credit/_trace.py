"""The implementation's trace hook: externally visible events, recorded only when asked.

An endpoint built with ``trace=sink`` calls ``sink.record(node, kind, fields)`` for each event it
makes visible (a message sent or received, a reservation, a commit, a fence, a restart, ...).
Without a sink every hook is a single ``is not None`` test, so tracing costs nothing when off.

The sink decides what to keep and how to store it; ``tent_models.trace.TraceRecorder`` writes the
versioned CBOR format documented in ``docs/traces.md`` and validated by ``tent trace validate``.
Fields are plain values (ints, strings, lists and dicts of those), so any sink can serialise
them. :func:`message_fields` turns a control message into such a dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import attrs

from ._messages import ControlMessage
from ._types import CreditAmount, SessionId

__all__ = ["TraceSink", "message_fields"]


class TraceSink(Protocol):
    """Receives one call per visible event (see ``docs/traces.md`` for nodes, kinds and fields)."""

    def record(self, node: str, kind: str, fields: Mapping[str, object]) -> None: ...


_AMOUNT_FIELDS = frozenset({"grants", "consumed_totals", "returned_totals", "pending_demand"})


def _plain(name: str, value: object) -> object:
    if isinstance(value, SessionId):
        return value.value
    if name in _AMOUNT_FIELDS and isinstance(value, tuple):
        return {int(a.resource): a.amount for a in value if isinstance(a, CreditAmount)}
    if isinstance(value, tuple):
        return list(value)
    return value


def message_fields(message: ControlMessage) -> dict[str, object]:
    """The message as ``{"type": class name, field: plain value, ...}``.

    Sessions become their integer value, amount lists a ``{resource wire value: amount}`` map.
    """
    fields: dict[str, object] = {"type": type(message).__name__}
    for name, value in attrs.asdict(message, recurse=False).items():
        fields[name] = _plain(name, value)
    return fields
