"""Diff-only state changes as text: what a chart's step shows and its tooltip lists.

The checker's text counterexamples (:func:`tent_models.checker.format_trace`) print each step's
changed fields as ``field: old -> new``; a chart shows the same lines, shortened to fit a
column. Issue 28 reworks the text counterexamples of the shipped models; this module only
renders :class:`~tent_models.checker.TraceStep` changes and logged variables, so it does not
depend on that work.
"""

from __future__ import annotations

from collections.abc import Mapping

from tent_models.checker._result import ABSENT

__all__ = ["Change", "changes", "mapping_changes", "shorten", "show"]

Change = tuple[str, str, str]
"""``(field, old, new)``, each already shown as text."""


def show(value: object) -> str:
    """A value as a chart shows it: ``repr``, except the checker's absent marker and sets,
    whose elements are sorted (a set's ``repr`` follows string hashing, which differs from one
    process to the next; a chart checked into the docs must not)."""
    if value is ABSENT:
        return ABSENT
    if isinstance(value, frozenset | set):
        inner = ", ".join(sorted(show(v) for v in value))
        return f"{type(value).__name__}({{{inner}}})" if value else f"{type(value).__name__}()"
    if type(value) is tuple:
        items = [show(v) for v in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    return repr(value)


def changes(changed: Mapping[str, tuple[object, object]]) -> tuple[Change, ...]:
    """A step's ``changed`` mapping (``field -> (old, new)``) as text, in its order."""
    return tuple((field, show(old), show(new)) for field, (old, new) in changed.items())


def mapping_changes(
    old: Mapping[str, object] | None, new: Mapping[str, object]
) -> tuple[Change, ...]:
    """The fields of ``new`` that differ from ``old`` (every field when ``old`` is ``None``),
    old fields first in their order, then new ones; a field only in ``old`` shows as absent."""
    before = dict(old or {})
    keys = [*before, *(k for k in new if k not in before)]
    out = []
    for key in keys:
        was, now = before.get(key, ABSENT), new.get(key, ABSENT)
        if old is None or was != now:
            out.append((key, show(was) if old is not None else "", show(now)))
    return tuple(out)


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the cut marked by an ellipsis."""
    if width < 2:
        raise ValueError("width must be at least 2")
    return text if len(text) <= width else text[: width - 1] + "…"
