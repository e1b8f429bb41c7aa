"""``tent trace from-incast``: the incast runner's ``TENT_INCAST_TRACE`` folder as traces in
the format of ``docs/traces.md``, one per process and run, for ``tent trace validate``.

The runner writes one JSON-lines file per process (``receiver.jsonl``, ``sender-<peer>.jsonl``),
appended across runs; each run starts with a ``config`` line (mode, sender ids, the receiver's
credit capacity) and goes on with every event the process's credit endpoints recorded, with
its monotonic time ``t``. Conversion, per run:

1. **The node.** A file keeps the events of its own process's node (``receiver`` or
   ``sender:<peer>``): an engine also runs the other side's endpoints for its own traffic.
2. **The spec instance** (the header's ``CreditBounds``): the four resources in wire order
   with the run's capacity (at least 1 each), the distinct charge vectors the run reserved,
   landed or committed, the restarts and stale events it recorded as fault budgets, no loss
   or duplication (TCP), and caps high enough never to bind.
3. **Sessions.** The receiver's 128-bit session ids become 1, 2, ... in the order the run
   saw them (the spec numbers sessions from 1).
4. **The handshake.** The spec starts with every sender active on epoch 1 of session 1, so a
   sender's events up to its first activation, and the receiver's first ``start``, are dropped
   (``docs/traces.md``: "the connection handshake that leads there is not recorded"). What
   follows is kept as recorded, including the allocator's initial grant.
5. **JSON keys.** Amount maps come back with integer resource keys.

Raises :class:`~tent_models.trace.TraceError` for a folder with nothing to convert, a run
that is not in credit mode, or a run with no charge to infer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import cbor2
from tent_spec.credit import CreditBounds

from tent_models.trace._format import (
    ALL_KINDS,
    FORMAT_VERSION,
    RECEIVER_VARS,
    SENDER_VARS,
    TRACE_KIND,
    TraceError,
    _bounds_to_wire,
)

__all__ = ["convert_incast"]

_RESOURCES = ("data_bytes", "request_slots", "staging_slots", "consumer_slots")  # wire 1..4
_AMOUNTS = frozenset(
    {
        "grants",
        "consumed_totals",
        "returned_totals",
        "pending_demand",
        "charge",
        "amounts",
        "grant_total",
        "consumed",
        "returned",
        "granted",
        "released",
        "reclaimed",
        "landed",
    }
)
_UNBOUNDED = 1 << 40  # a cap no run reaches


def _segments(path: Path) -> list[list[dict[str, Any]]]:
    """The runs of one file: each a ``config`` line and the events after it."""
    runs: list[list[dict[str, Any]]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise TraceError(f"{path.name}:{number}: not JSON: {exc}") from exc
        if not isinstance(item, dict) or "kind" not in item or "node" not in item:
            raise TraceError(f"{path.name}:{number}: not an event with 'node' and 'kind'")
        if item["kind"] == "config":
            runs.append([item])
        elif runs:
            runs[-1].append(item)
    return runs


def _plain(name: str, value: Any, sessions: Mapping[int, int]) -> Any:
    """A JSON field back as the trace format has it: integer keys, spec session numbers."""
    if name in _AMOUNTS and isinstance(value, dict):
        return {int(k): v for k, v in value.items()}
    if name in ("session", "receiver_session_id") and isinstance(value, int) and value:
        return sessions.get(value, value)
    if isinstance(value, dict):
        return {k: _plain(k, v, sessions) for k, v in value.items()}
    return value


def _vector(raw: Mapping[Any, Any]) -> tuple[int, ...]:
    return tuple(int(raw.get(str(r), raw.get(r, 0))) for r in range(1, len(_RESOURCES) + 1))


def _config(config: Mapping[str, Any]) -> tuple[list[int], dict[str, int]]:
    """A run's sender ids and credit capacity, checked (:class:`TraceError` otherwise)."""
    if config.get("mode") != "credit" or not config.get("capacity"):
        raise TraceError(f"a run in {config.get('mode')!r} mode has no credit to validate")
    senders, capacity = config.get("senders"), config["capacity"]
    if not (isinstance(senders, list) and senders and all(type(s) is int for s in senders)):
        raise TraceError(f"the config line's senders must be peer ids, got {senders!r}")
    if not (isinstance(capacity, dict) and all(type(v) is int for v in capacity.values())):
        raise TraceError(f"the config line's capacity must map resources to ints: {capacity!r}")
    return senders, capacity


def _bounds(config: Mapping[str, Any], events: Iterable[Mapping[str, Any]]) -> CreditBounds:
    senders, capacity = _config(config)
    charges: list[tuple[int, ...]] = []
    restarts = {"sender": 0, "receiver": 0}
    stale = 0
    for event in events:
        for field in ("charge", "amounts"):
            raw = event.get(field)
            if isinstance(raw, dict) and event["kind"] in ("reserve", "commit", "land"):
                try:
                    vector = _vector(raw)
                except (TypeError, ValueError) as exc:
                    raise TraceError(f"an amount map that is not amounts: {raw!r}") from exc
                if any(vector) and vector not in charges:
                    charges.append(vector)
        if event["kind"] == "start":
            restarts["receiver" if event["node"] == "receiver" else "sender"] += 1
        stale += event["kind"] in ("stale", "disconnect")
    if not charges:
        raise TraceError("the run reserved nothing: its charge vectors cannot be inferred")
    try:
        return _credit_bounds(senders, capacity, charges, restarts, stale)
    except ValueError as exc:  # InvalidBounds: a capacity or charge the spec cannot take
        raise TraceError(f"the run is no credit spec instance: {exc}") from exc


def _credit_bounds(
    senders: list[int],
    capacity: Mapping[str, int],
    charges: list[tuple[int, ...]],
    restarts: Mapping[str, int],
    stale: int,
) -> CreditBounds:
    return CreditBounds(
        senders=len(senders),
        capacity=tuple(max(1, int(capacity.get(name, 0))) for name in _RESOURCES),
        charges=tuple(sorted(charges)),
        max_grant_total=_UNBOUNDED,
        max_tokens=_UNBOUNDED,
        max_epoch=_UNBOUNDED,
        max_messages=_UNBOUNDED,
        max_sender_restarts=max(0, restarts["sender"] - len(senders)),
        max_receiver_restarts=max(0, restarts["receiver"] - 1),
        max_stale=stale,
        max_seq=_UNBOUNDED,
    )


def _node_of(config: Mapping[str, Any]) -> str:
    name = str(config.get("node", ""))
    return "receiver" if name == "receiver" else name.replace("sender-", "sender:", 1)


def _events(
    run: list[dict[str, Any]], node: str, senders: list[int], sessions: Mapping[int, int]
) -> list[dict[str, Any]]:
    """The run's events of ``node`` after its handshake (rules 1, 3, 4, 5)."""
    out: list[dict[str, Any]] = []
    started = activated = node == "receiver"
    first_start = True
    for item in run[1:]:
        if item["node"] != node:
            continue
        if node == "receiver" and item.get("peer") not in (None, *senders):
            continue  # a key of another peer (the receiver's own staging key)
        if item["kind"] == "start" and first_start:
            first_start = False
            started = True
            continue
        msg = item.get("msg") or {}
        if not activated:
            activated = item["kind"] == "receive" and msg.get("type") == "CapabilityActivation"
            continue
        if not started:
            continue
        event = {"n": node, "k": item["kind"]}
        for key, value in item.items():
            if key not in ("t", "node", "kind"):
                event[key] = _plain(key, value, sessions)
        out.append(event)
    return out


def _sessions(own: list[dict[str, Any]]) -> dict[int, int]:
    """Receiver session id -> 1, 2, ... in time order (rule 3): the receiver's own starts,
    else (sender files only) the sessions the senders' messages name."""
    starts = [e.get("session") for e in own if e["node"] == "receiver" and e["kind"] == "start"]
    named = [
        (e.get("msg") or {}).get("receiver_session_id") for e in own if e["node"] != "receiver"
    ]
    ids = [s for s in starts if isinstance(s, int)] or [
        s for s in named if isinstance(s, int) and s
    ]
    return {sid: n for n, sid in enumerate(dict.fromkeys(ids), 1)}


def convert_incast(folder: Path, out: Path) -> list[Path]:
    """Convert every run of every ``*.jsonl`` file of ``folder`` into ``out`` (created):
    ``<process>.cbor``, or ``<process>.run<k>.cbor`` when a file holds several runs. Returns
    the files written. Raises :class:`TraceError` (see the module docstring), ``OSError``."""
    runs = {path: _segments(path) for path in sorted(folder.glob("*.jsonl"))}
    if not any(runs.values()):
        raise TraceError(f"{folder}: no incast trace (a *.jsonl file with a config line)")
    count = max(len(r) for r in runs.values())
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for k in range(count):
        segments = {path: r[k] for path, r in runs.items() if k < len(r)}
        own = sorted(
            (e for seg in segments.values() for e in seg[1:] if e["node"] == _node_of(seg[0])),
            key=lambda e: int(e.get("t", 0)),
        )
        sessions = _sessions(own)
        for path, seg in segments.items():
            config, node = seg[0], _node_of(seg[0])
            senders, _capacity = _config(config)
            header = {
                "v": FORMAT_VERSION,
                "kind": TRACE_KIND,
                "model": _bounds_to_wire(_bounds(config, own)),
                "senders": senders,
                "nodes": [node],
                "events": list(ALL_KINDS),
                "logged": list(dict.fromkeys((*SENDER_VARS, *RECEIVER_VARS))),
            }
            body = _events(seg, node, senders, sessions)
            target = out / (f"{path.stem}.cbor" if count == 1 else f"{path.stem}.run{k + 1}.cbor")
            target.write_bytes(
                b"".join(cbor2.dumps(item, canonical=True) for item in (header, *body))
            )
            written.append(target)
    return written
