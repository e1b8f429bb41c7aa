"""The Informal Trace Format (ITF): counterexamples out as JSON for Apalache and Quint tools,
and ITF traces in, validated against a model (``tent trace validate``).

The format is Apalache's ADR-015 (the file ``015adr-trace.md`` in the Apalache repository's
``docs/src/adr`` folder): a trace is ``{"#meta"?, "params"?, "vars", "states", "loop"?}``; a
state maps every variable to an expression, with ``"#meta"`` for tool data. Expressions: JSON
strings, booleans, integers (or ``{"#bigint": "<digits>"}`` beyond 2^53), lists, records (JSON
objects), ``{"#tup": [...]}``, ``{"#set": [...]}``, ``{"#map": [[key, value], ...]}`` and
``{"#unserializable": "<text>"}``.

How a state of ours is written (:func:`encode`): the variables are the fields of the model's
``describe`` view; ints, bools and strings as themselves (``#bigint`` when large), a tuple as
``#tup``, a named tuple or a str-keyed mapping as a record, any other mapping as ``#map``, a
frozenset as ``#set`` (sorted, so files are stable), an enum by its name, ``None`` and the
checker's absent marker as ``#unserializable``. Each state's ``#meta`` holds its ``index`` and,
after the first, the ``action`` taken, its ``args`` and its printed ``label``; the trace's
``#meta`` names the format, the model and target, and the violated property.

Reading (:func:`read_itf`) checks the shape the ADR requires (every state defines every
variable, ``loop`` indexes a state) and raises :class:`ItfError` otherwise.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from tent_models.checker import CounterExample, TraceStep
from tent_models.checker._result import ABSENT

__all__ = [
    "FORMAT_DESCRIPTION",
    "ItfError",
    "ItfTrace",
    "canonical",
    "decode",
    "encode",
    "itf_document",
    "read_itf",
    "show",
]

FORMAT_DESCRIPTION = "https://apalache-mc.org/docs/adr/015adr-trace.html"
_SAFE = 2**53 - 1  # RFC 7159: JSON integers within ±(2^53 - 1) may be written as numbers
_TAGS = ("#bigint", "#tup", "#set", "#map", "#unserializable")


class ItfError(ValueError):
    """A file that is not an ITF trace: not JSON, or not the shape ADR-015 gives it."""


def encode(value: object) -> Any:
    """``value`` as an ITF expression (see the module docstring)."""
    if value is ABSENT or value is None:
        return {"#unserializable": str(value)}
    if isinstance(value, bool | str):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, int):
        return value if -_SAFE <= value <= _SAFE else {"#bigint": str(value)}
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {str(k): encode(v) for k, v in value._asdict().items()}
    if isinstance(value, tuple):
        return {"#tup": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, frozenset | set):
        items = [encode(v) for v in value]
        return {"#set": sorted(items, key=lambda item: json.dumps(item, sort_keys=True))}
    if isinstance(value, Mapping):
        if all(isinstance(k, str) and not k.startswith("#") for k in value):
            return {k: encode(v) for k, v in value.items()}
        pairs = [[encode(k), encode(v)] for k, v in value.items()]
        return {"#map": sorted(pairs, key=lambda pair: json.dumps(pair[0], sort_keys=True))}
    if attrs.has(type(value)):
        return {k: encode(v) for k, v in attrs.asdict(value, recurse=False).items()}  # type: ignore[arg-type]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return {"#unserializable": repr(value)}


def canonical(expr: Any) -> Any:
    """A hashable normal form of an ITF expression, for comparing two of them: an integer in
    either form is one value, a list and a ``#tup`` of equal items are equal (the ADR leaves
    the choice to the tool), so are a record and a ``#map`` with the same string keys (a
    Python dict is either), and a set's and a map's order does not matter."""
    if isinstance(expr, bool):
        return ("bool", expr)
    if isinstance(expr, int):
        return ("int", expr)
    if isinstance(expr, str):
        return ("str", expr)
    if isinstance(expr, list):
        return ("seq", tuple(canonical(e) for e in expr))
    if isinstance(expr, dict):
        if "#bigint" in expr:
            return ("int", int(expr["#bigint"]))
        if "#tup" in expr:
            return ("seq", tuple(canonical(e) for e in expr["#tup"]))
        if "#set" in expr:
            return ("set", tuple(sorted((canonical(e) for e in expr["#set"]), key=repr)))
        if "#map" in expr:
            pairs = ((canonical(k), canonical(v)) for k, v in expr["#map"])
            return ("map", tuple(sorted(pairs, key=repr)))
        if "#unserializable" in expr:
            return ("unserializable", str(expr["#unserializable"]))
        pairs = ((("str", k), canonical(v)) for k, v in expr.items())
        return ("map", tuple(sorted(pairs, key=repr)))
    raise ItfError(f"not an ITF expression: {expr!r}")


def _check_expr(expr: Any, where: str) -> None:
    """Raise :class:`ItfError` unless ``expr`` is a well-formed ITF expression."""
    if isinstance(expr, bool | str | int):
        return
    if isinstance(expr, float):
        raise ItfError(f"{where}: {expr!r} is not an integer (ITF has no floats)")
    if isinstance(expr, list):
        for i, item in enumerate(expr):
            _check_expr(item, f"{where}[{i}]")
        return
    if not isinstance(expr, dict):
        raise ItfError(f"{where}: {expr!r} is not an ITF expression")
    tags = [k for k in expr if k.startswith("#")]
    if not tags:
        for key, item in expr.items():
            _check_expr(item, f"{where}.{key}")
        return
    if len(expr) != 1 or tags[0] not in _TAGS:
        raise ItfError(f"{where}: unknown or mixed ITF tag(s) {sorted(expr)}")
    tag, body = tags[0], expr[tags[0]]
    if tag == "#bigint":
        text = body[1:] if isinstance(body, str) and body.startswith("-") else body
        if not (isinstance(text, str) and text.isdigit()):
            raise ItfError(f"{where}: #bigint must be a string of digits, got {body!r}")
    elif tag == "#unserializable":
        if not isinstance(body, str):
            raise ItfError(f"{where}: #unserializable must be a string, got {body!r}")
    elif not isinstance(body, list):
        raise ItfError(f"{where}: {tag} must hold a list, got {body!r}")
    elif tag == "#map":
        for i, pair in enumerate(body):
            if not (isinstance(pair, list) and len(pair) == 2):
                raise ItfError(f"{where}.#map[{i}]: a map entry is a [key, value] pair")
            _check_expr(pair[0], f"{where}.#map[{i}].key")
            _check_expr(pair[1], f"{where}.#map[{i}].value")
    else:
        for i, item in enumerate(body):
            _check_expr(item, f"{where}.{tag}[{i}]")


def show(expr: Any) -> str:
    """An ITF expression as compact readable text (what the charts and reports print)."""
    if isinstance(expr, bool | int):
        return repr(expr)
    if isinstance(expr, str):
        return repr(expr)
    if isinstance(expr, list):
        return "[" + ", ".join(show(e) for e in expr) + "]"
    if "#bigint" in expr:
        return str(expr["#bigint"])
    if "#tup" in expr:
        items = [show(e) for e in expr["#tup"]]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if "#set" in expr:
        return "{" + ", ".join(show(e) for e in expr["#set"]) + "}"
    if "#map" in expr:
        return "{" + ", ".join(f"{show(k)}: {show(v)}" for k, v in expr["#map"]) + "}"
    if "#unserializable" in expr:
        return str(expr["#unserializable"])
    return "{" + ", ".join(f"{k}: {show(v)}" for k, v in expr.items()) + "}"


def decode(expr: Any) -> Any:
    """An ITF expression as a Python value: a ``#tup`` or list a tuple, a ``#set`` a frozenset,
    a ``#map`` or record a dict (a frozenset of its items inside a set), ``#bigint`` an int,
    ``#unserializable`` its text. Used to rebuild action arguments from a state's ``#meta``."""
    if isinstance(expr, bool | int | str):
        return expr
    if isinstance(expr, list):
        return tuple(decode(e) for e in expr)
    if "#bigint" in expr:
        return int(expr["#bigint"])
    if "#tup" in expr:
        return tuple(decode(e) for e in expr["#tup"])
    if "#set" in expr:
        return frozenset(_hashable(decode(e)) for e in expr["#set"])
    if "#map" in expr:
        return {_hashable(decode(k)): decode(v) for k, v in expr["#map"]}
    if "#unserializable" in expr:
        return str(expr["#unserializable"])
    return {k: decode(v) for k, v in expr.items()}


def _hashable(value: Any) -> Any:
    return frozenset(value.items()) if isinstance(value, dict) else value


@attrs.frozen(kw_only=True)
class ItfTrace:
    """A read ITF trace: ``states`` are the variable maps (ITF expressions, ``#meta`` removed),
    ``state_meta`` each state's ``#meta`` (empty when absent)."""

    meta: Mapping[str, Any]
    params: tuple[str, ...]
    vars: tuple[str, ...]
    states: tuple[Mapping[str, Any], ...]
    state_meta: tuple[Mapping[str, Any], ...]
    loop: int | None = None


def read_itf(data: str | bytes | Path) -> ItfTrace:
    """Parse and check an ITF trace (text, bytes or a file path).

    Raises :class:`ItfError` for anything that is not JSON or not an ADR-015 trace: no
    ``vars`` / ``states`` list, a state that misses a variable, an expression with an unknown
    tag or a float, a ``loop`` that is not a state index. ``OSError`` when a path cannot be read.
    """
    raw = Path(data).read_bytes() if isinstance(data, Path) else data
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ItfError(f"not JSON: {exc}") from exc
    except RecursionError as exc:
        raise ItfError("not JSON this reader accepts: nested too deeply") from exc
    if not isinstance(doc, dict):
        raise ItfError("an ITF trace is a JSON object")
    meta = doc.get("#meta", {})
    params = doc.get("params", [])
    names = doc.get("vars")
    states = doc.get("states")
    if not isinstance(meta, dict):
        raise ItfError("#meta must be an object")
    if not (isinstance(params, list) and all(isinstance(p, str) for p in params)):
        raise ItfError("params must be a list of strings")
    if not (isinstance(names, list) and all(isinstance(v, str) for v in names)):
        raise ItfError("vars must be a list of strings")
    if len(set(names)) != len(names):
        raise ItfError("vars names a variable twice")
    if not isinstance(states, list) or not states:
        raise ItfError("states must be a non-empty list of state objects")
    loop = doc.get("loop")
    if loop is not None and not (
        isinstance(loop, int) and not isinstance(loop, bool) and 0 <= loop < len(states)
    ):
        raise ItfError(f"loop {loop!r} is not the index of a state")
    try:
        values, metas = _states(states, params, names)
    except RecursionError as exc:
        raise ItfError("an expression nested too deeply") from exc
    return ItfTrace(
        meta=meta,
        params=tuple(params),
        vars=tuple(names),
        states=tuple(values),
        state_meta=tuple(metas),
        loop=loop,
    )


def _states(
    states: list[Any], params: list[str], names: list[str]
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """Each state's variables and ``#meta``, checked (:class:`ItfError` otherwise)."""
    values: list[Mapping[str, Any]] = []
    metas: list[Mapping[str, Any]] = []
    for i, state in enumerate(states):
        if not isinstance(state, dict):
            raise ItfError(f"state {i} is not an object")
        state_meta = state.get("#meta", {})
        if not isinstance(state_meta, dict):
            raise ItfError(f"state {i}: #meta must be an object")
        missing = (
            [v for v in (*params, *names) if v not in state]
            if i == 0
            else [v for v in names if v not in state]
        )
        if missing:
            raise ItfError(f"state {i} does not define {', '.join(missing)}")
        for key, expr in state.items():
            if key != "#meta":
                _check_expr(expr, f"state {i}: {key}")
        values.append({k: v for k, v in state.items() if k != "#meta"})
        metas.append(state_meta)
    return values, metas


def itf_document(
    steps: Sequence[TraceStep],
    *,
    source: str,
    model: str,
    violation: CounterExample | None = None,
    description: str = "Created by tent (tent-protocol)",
) -> dict[str, Any]:
    """The ITF trace of ``steps`` (a counterexample's or witness's :class:`TraceStep` values).

    ``vars`` is every field any state describes (a field a state lacks is written as
    ``#unserializable "<absent>"``, since ITF wants every variable in every state).
    """
    names: list[str] = []
    for step in steps:
        names.extend(k for k in step.fields if k not in names)
    meta: dict[str, Any] = {
        "format": "ITF",
        "format-description": FORMAT_DESCRIPTION,
        "source": source,
        "description": description,
        "tent": {"target": source, "model": model},
    }
    if violation is not None:
        meta["tent"].update(
            kind=violation.kind.value,
            property=violation.name,
            cites=violation.cites,
            compared={k: encode(v) for k, v in violation.compared.items()},
        )
    states = []
    for step in steps:
        state: dict[str, Any] = {"#meta": {"index": step.index}}
        if step.action is not None:
            state["#meta"].update(
                action=step.action,
                args=encode(tuple(step.args)),
                label=f"{step.action}({', '.join(repr(a) for a in step.args)})",
            )
        for name in names:
            state[name] = encode(step.fields.get(name, ABSENT))
        states.append(state)
    return {"#meta": meta, "vars": names, "states": states}
