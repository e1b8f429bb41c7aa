"""Which node of the system each step of a trace belongs to: a model's chart hook.

A sequence chart draws one vertical lifeline per node and each step as an arrow between two
lifelines (a message) or a box on one (a local action). Only the model knows its nodes, so it
may declare them with two optional methods, structurally like the rest of
:class:`~tent_models.model_api.SpecModel` (a spec that imports nothing from ``tent_models``
returns plain tuples):

``lifelines(self) -> Sequence[str]``
    The nodes, left to right: each sender, the network (when the model has one), the receiver.

``locate(self, state, action, args) -> tuple``
    Where the step ``action(*args)``, taken in ``state``, happens: a :class:`Placement` or a
    plain tuple of the same shape ``(kind, source, target, label)`` (``target`` and ``label``
    may be left out). ``kind`` is one of :data:`KINDS`:

    * ``"local"``: a box on ``source`` (a reservation, a timer, a restart);
    * ``"send"``: a message from ``source`` towards ``target`` (often the network);
    * ``"deliver"``: a message arrives: from ``source`` (the network) at ``target``;
    * ``"duplicate"``: the network delivers or keeps a second copy (from ``source`` to ``target``);
    * ``"lose"``: a message from ``source`` to ``target`` is lost on the way.

    ``label`` is the short text drawn on the arrow or box (default: ``action(args)``); the full
    action is always in the step's tooltip and table.

A model that declares neither gets one lifeline named after the model, every step a box on it
(:func:`placements` falls back by itself). A model that declares them wrongly (an unknown kind,
a node not among its lifelines, a hook that raises) gets a :class:`ChartError` naming the step.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

from tent_models.checker._trace import format_action

__all__ = [
    "DELIVER",
    "DUPLICATE",
    "KINDS",
    "LOCAL",
    "LOSE",
    "SEND",
    "ChartError",
    "Placement",
    "declares_lifelines",
    "lifelines",
    "placements",
]

LOCAL = "local"
SEND = "send"
DELIVER = "deliver"
DUPLICATE = "duplicate"
LOSE = "lose"
KINDS = (LOCAL, SEND, DELIVER, DUPLICATE, LOSE)
"""The kinds of step a chart draws: a box (``local``) or an arrow (the others)."""


class ChartError(ValueError):
    """A model's chart hook answered something the chart cannot draw (the message says which
    step and why). Nothing is drawn for that trace; the rest of a report is unaffected."""


class Placement(NamedTuple):
    """Where one step happens (see the module docstring): ``target`` is ``None`` for a box."""

    kind: str
    source: str
    target: str | None = None
    label: str | None = None


def declares_lifelines(model: Any) -> bool:
    """True when ``model`` declares the chart hook (both ``lifelines`` and ``locate``)."""
    return callable(getattr(model, "lifelines", None)) and callable(getattr(model, "locate", None))


def lifelines(model: Any) -> tuple[str, ...]:
    """The model's lifelines, or one named after the model when it declares none.

    Raises :class:`ChartError` when the declared ones are empty, not strings, or repeat a name.
    """
    if not declares_lifelines(model):
        return (str(getattr(model, "name", "") or "model"),)
    try:
        nodes = tuple(model.lifelines())
    except Exception as exc:
        raise ChartError(f"lifelines() raised {type(exc).__name__}: {exc}") from exc
    if not nodes or not all(isinstance(n, str) and n for n in nodes):
        raise ChartError(f"lifelines() must name at least one node as a string, got {nodes!r}")
    if len(set(nodes)) != len(nodes):
        raise ChartError(f"lifelines() names a node twice: {nodes!r}")
    return nodes


def _placement(raw: object, nodes: Sequence[str], where: str) -> Placement:
    """``raw`` checked and normalised into a :class:`Placement` (``ChartError`` if it is not)."""
    if not isinstance(raw, tuple) or not 2 <= len(raw) <= 4:
        raise ChartError(
            f"{where}: locate() must return (kind, source[, target[, label]]), got {raw!r}"
        )
    kind, source, target, label = (*raw, None, None)[:4]
    if kind not in KINDS:
        raise ChartError(f"{where}: unknown kind {kind!r} (kinds: {', '.join(KINDS)})")
    if source not in nodes:
        raise ChartError(f"{where}: source {source!r} is not a lifeline ({', '.join(nodes)})")
    if kind == LOCAL:
        if target not in (None, source):
            raise ChartError(f"{where}: a local step has no target, got {target!r}")
        target = None
    elif target not in nodes:
        raise ChartError(f"{where}: target {target!r} is not a lifeline ({', '.join(nodes)})")
    if label is not None and not isinstance(label, str):
        raise ChartError(f"{where}: the label must be a string, got {label!r}")
    return Placement(kind, source, target, label)


def placements(
    model: Any,
    states: Sequence[Any],
    actions: Sequence[tuple[str, tuple[Hashable, ...]]],
) -> tuple[Placement, ...]:
    """The placement of each step ``actions[i]``, taken in ``states[i]``.

    Without the hook every step is a box on the single lifeline. Raises :class:`ChartError`
    when the hook raises or answers a placement the chart cannot draw.
    """
    nodes = lifelines(model)
    if not declares_lifelines(model):
        return tuple(Placement(LOCAL, nodes[0]) for _ in actions)
    out = []
    for index, ((action, args), state) in enumerate(zip(actions, states, strict=False), 1):
        where = f"step {index} {format_action(action, args)}"
        try:
            raw = model.locate(state, action, tuple(args))
        except Exception as exc:
            raise ChartError(f"{where}: locate() raised {type(exc).__name__}: {exc}") from exc
        out.append(_placement(raw, nodes, where))
    return tuple(out)
