"""The trace format (``docs/traces.md``): its constants, :class:`TraceRecorder` (the
``tent_credit`` trace sink that writes a trace) and :func:`read_trace`.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import cbor2
from tent_spec.credit import (
    CreditBounds,
)

FORMAT_VERSION = 1
TRACE_KIND = "tent-credit-trace"
SENDER_VARS = ("session", "epoch", "grant_total", "consumed", "returned", "state")
RECEIVER_VARS = ("state", "granted", "released", "reclaimed", "landed")
ALL_KINDS = (
    "start",
    "accept",
    "send",
    "receive",
    "reserve",
    "commit",
    "rollback",
    "complete",
    "return",
    "stale",
    "disconnect",
    "land",
    "release",
    "fence",
    "fence_complete",
)


class TraceError(ValueError):
    """A trace file that cannot be read: not CBOR, unknown version, malformed header/record."""


# --------------------------------------------------------------------------------------------
# Recording
# --------------------------------------------------------------------------------------------


def _bounds_to_wire(bounds: CreditBounds) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in attrs.fields(CreditBounds):
        value = getattr(bounds, field.name)
        if isinstance(value, tuple):
            value = [list(v) if isinstance(v, tuple) else v for v in value]
        out[field.name] = value
    return out


def _bounds_from_wire(raw: object) -> CreditBounds:
    if not isinstance(raw, dict):
        raise TraceError("header 'model' must be a map of CreditBounds fields")
    try:
        fields = dict(raw)
        fields["capacity"] = tuple(fields["capacity"])
        fields["charges"] = tuple(tuple(c) for c in fields["charges"])
        return CreditBounds(**fields)
    except (KeyError, TypeError, ValueError) as error:
        raise TraceError(f"header 'model' is not a valid CreditBounds: {error}") from error


class TraceRecorder:
    """A ``tent_credit`` trace sink that keeps the events and writes the CBOR trace format.

    ``nodes`` keeps only those nodes' events (a per-node trace: ``("sender:1",)``), ``kinds``
    only those event kinds, ``logged`` only those variables (a partial trace); ``None`` keeps
    all. ``senders`` lists the implementation's sender peer ids in spec order. Events before
    :meth:`begin` are dropped (the trace starts at the spec's initial state). Construction
    raises :class:`TraceError` for an unknown kind or variable.
    """

    def __init__(
        self,
        bounds: CreditBounds,
        *,
        senders: Sequence[int],
        nodes: Iterable[str] | None = None,
        kinds: Iterable[str] | None = None,
        logged: Iterable[str] | None = None,
    ) -> None:
        self.bounds = bounds
        self.senders = tuple(senders)
        if len(self.senders) != bounds.senders:
            raise TraceError(f"{len(self.senders)} sender ids for {bounds.senders} senders")
        everyone = ("receiver", *(f"sender:{p}" for p in self.senders))
        self.nodes = tuple(everyone if nodes is None else nodes)
        self.kinds = tuple(ALL_KINDS if kinds is None else kinds)
        self.logged = tuple(
            dict.fromkeys((*SENDER_VARS, *RECEIVER_VARS) if logged is None else logged)
        )
        for node in self.nodes:
            if node not in everyone:
                raise TraceError(f"unknown node {node!r} (nodes: {everyone})")
        for kind in self.kinds:
            if kind not in ALL_KINDS:
                raise TraceError(f"unknown event kind {kind!r}")
        for var in self.logged:
            if var not in (*SENDER_VARS, *RECEIVER_VARS):
                raise TraceError(f"unknown variable {var!r}")
        self.events: list[dict[str, Any]] = []
        self._recording = False

    def begin(self) -> None:
        """Start recording: the next event is the first after the spec's initial state."""
        self._recording = True

    def record(self, node: str, kind: str, fields: Mapping[str, object]) -> None:
        """The ``TraceSink`` hook (called by the endpoints)."""
        if not self._recording or node not in self.nodes or kind not in self.kinds:
            return
        item: dict[str, Any] = {"n": node, "k": kind}
        for name, value in fields.items():
            if name == "vars" and isinstance(value, Mapping):
                # a partial trace: only the logged variables (and the epoch they belong to)
                item[name] = {k: v for k, v in value.items() if k in self.logged or k == "epoch"}
            else:
                item[name] = value
        self.events.append(item)

    def header(self) -> dict[str, Any]:
        """The trace's header item."""
        return {
            "v": FORMAT_VERSION,
            "kind": TRACE_KIND,
            "model": _bounds_to_wire(self.bounds),
            "senders": list(self.senders),
            "nodes": list(self.nodes),
            "events": list(self.kinds),
            "logged": list(self.logged),
        }

    def dumps(self) -> bytes:
        """The whole trace as bytes (a CBOR sequence, canonical encoding)."""
        return b"".join(cbor2.dumps(item, canonical=True) for item in (self.header(), *self.events))

    def write(self, path: str | Path) -> None:
        """Write the trace to ``path``."""
        Path(path).write_bytes(self.dumps())


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class TraceFile:
    """A decoded trace: its header fields and its events (plain CBOR values)."""

    bounds: CreditBounds
    senders: tuple[int, ...]
    nodes: tuple[str, ...]
    kinds: tuple[str, ...]
    logged: tuple[str, ...]
    events: tuple[Mapping[str, Any], ...]


def _items(raw: bytes) -> list[Any]:
    """Every item of a CBOR sequence (RFC 8742)."""
    stream = io.BytesIO(raw)
    decoder = cbor2.CBORDecoder(stream)
    items = []
    while stream.tell() < len(raw):
        items.append(decoder.decode())
    return items


def read_trace(data: bytes | str | Path) -> TraceFile:
    """Decode a trace from bytes or a file path. Raises :class:`TraceError` when it is not a
    version-1 credit trace (or a record is not a map with ``n`` and ``k``)."""
    raw = data if isinstance(data, bytes) else Path(data).read_bytes()
    try:
        items = _items(raw)
    except (cbor2.CBORDecodeError, ValueError) as error:
        raise TraceError(f"not a CBOR sequence: {error}") from error
    if not items or not isinstance(items[0], dict):
        raise TraceError("missing header")
    header = items[0]
    if header.get("v") != FORMAT_VERSION:
        raise TraceError(f"unsupported trace format version {header.get('v')!r}")
    if header.get("kind") != TRACE_KIND:
        raise TraceError(f"not a credit trace (kind {header.get('kind')!r})")
    bounds = _bounds_from_wire(header.get("model"))
    senders = tuple(header.get("senders", ()))
    if len(senders) != bounds.senders:
        raise TraceError("header 'senders' must list one peer id per spec sender")
    for i, item in enumerate(items[1:], start=1):
        if not isinstance(item, dict) or "n" not in item or "k" not in item:
            raise TraceError(f"record {i} is not an event map with 'n' and 'k'")
    return TraceFile(
        bounds=bounds,
        senders=senders,
        nodes=tuple(header.get("nodes", ())),
        kinds=tuple(header.get("events", ALL_KINDS)),
        logged=tuple(header.get("logged", ())),
        events=tuple(items[1:]),
    )
