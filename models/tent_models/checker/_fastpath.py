"""A model's optional fast path for the checker's hot loop (docs/design.md#checker-bar: "let the
checker work on a compact encoding in its hot loop").

The :class:`~tent_models.model_api.SpecModel` protocol is all the checker needs. A model may
also offer, for speed only:

* ``fingerprint(state) -> int``: its own stable 64-bit fingerprint (e.g. a sum of memoised
  per-component digests), with :mod:`._fingerprint`'s properties; used instead of hashing
  ``pack(state)``.
* ``fingerprinted_successors(state)``: ``(action, args, canonicalize(next),
  fingerprint(canonicalize(next)))`` for every step of ``successors(state)`` in the same order;
  used when symmetry is on.
* ``invariants_hold(state) -> bool``: the conjunction of ``invariants()``; the named invariants
  are then evaluated only where it is false.
* ``intern(state)``: an equal state built from objects the model shares (the multi-process
  engine calls it on states that arrive from another worker, so memo tables keyed by object
  identity recognise them).

Each must equal what it replaces; a model's tests prove that (tests/models/test_spec_fastpath.py
for the credit spec), and :class:`PlainModel` hides the fast path so the two explorations can be
compared state by state (``tent check --plain``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from tent_models.checker._components import COMPONENT_METHODS, ComponentEngine, has_components
from tent_models.checker._fingerprint import fingerprint
from tent_models.model_api import no_symmetry

__all__ = [
    "FAST_PATH_METHODS",
    "HIDDEN_METHODS",
    "Expansion",
    "PlainModel",
    "component_engine",
    "expander",
    "fingerprinter",
]

FAST_PATH_METHODS = ("fingerprint", "fingerprinted_successors", "intern", "invariants_hold")

# What PlainModel hides: the hand-written fast path and the component declarations.
HIDDEN_METHODS = FAST_PATH_METHODS + COMPONENT_METHODS

Expansion = Iterable[tuple[str, tuple[Any, ...], Any, int]]

_engines: weakref.WeakKeyDictionary[Any, ComponentEngine] = weakref.WeakKeyDictionary()


def component_engine(model: Any) -> ComponentEngine | None:
    """The shared :class:`ComponentEngine` of a model that declares footprints, else None.

    One engine per model object, so the initial states, the expansion and the simulation
    intern into the same tables (fingerprints are value-based either way).
    """
    if not has_components(model):
        return None
    try:
        engine = _engines.get(model)
        if engine is None:
            engine = _engines[model] = ComponentEngine(model)
    except TypeError:  # a model that cannot be weakly referenced: an engine of its own
        return ComponentEngine(model)
    return engine


def fingerprinter(model: Any) -> Callable[[Any], int]:
    """The state -> fingerprint function the checker uses for ``model``.

    A model may provide its own stable ``fingerprint(state)`` (the fast path of
    docs/design.md#checker-bar, "compact encoding in the hot loop", e.g. hashing memoised
    per-component digests); it must then be a 64-bit value that depends only on the state's value,
    identical in every process, and equal exactly when ``pack`` is equal (up to 64-bit collisions).
    Otherwise it is ``fingerprint(model.pack(state))``.
    """
    own = getattr(model, "fingerprint", None)
    if callable(own):
        return own  # type: ignore[no-any-return]
    engine = component_engine(model)
    if engine is not None:
        return engine.fingerprint
    pack = model.pack

    def of(state: Any) -> int:
        return fingerprint(pack(state))

    return of


def expander(model: Any, *, symmetry: bool) -> Callable[[Any], Expansion]:
    """The hot loop's ``state -> (action, args, next state, fingerprint)`` function.

    ``next state`` is canonical when ``symmetry`` is on. A model may fuse the three steps in a
    ``fingerprinted_successors(state)`` method (same steps, same order as ``successors``, each
    successor canonicalised and fingerprinted, typically from memoised per-component digests);
    it is used when symmetry is on. Otherwise: ``successors``, ``canonicalize`` and
    :func:`fingerprinter`.
    """
    fingerprint_of = fingerprinter(model)
    successors = model.successors
    engine = component_engine(model) if not callable(getattr(model, "fingerprint", None)) else None
    if engine is not None:
        identity = getattr(type(model), "canonicalize", None) is no_symmetry
        canonicalizer = model.canonicalize if symmetry and not identity else None

        def by_component(state: Any) -> Expansion:
            return engine.expand(state, canonicalizer)

        return by_component
    if not symmetry or getattr(type(model), "canonicalize", None) is no_symmetry:

        def plain(state: Any) -> Expansion:
            for action, args, nxt in successors(state):
                yield action, args, nxt, fingerprint_of(nxt)

        return plain
    fused = getattr(model, "fingerprinted_successors", None)
    if callable(fused):
        return fused  # type: ignore[no-any-return]
    canonicalize = model.canonicalize

    def canonical(state: Any) -> Expansion:
        for action, args, raw in successors(state):
            nxt = canonicalize(raw)
            yield action, args, nxt, fingerprint_of(nxt)

    return canonical


class PlainModel:
    """``model`` with its fast-path methods hidden: the checker then uses only the
    ``SpecModel`` protocol (``successors``, ``canonicalize``, ``pack``, every invariant)."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self.name: str = model.name

    def __getattr__(self, name: str) -> Any:
        if name in HIDDEN_METHODS:
            raise AttributeError(f"{name} is hidden by PlainModel")
        return getattr(self._model, name)

    # The protocol methods, spelled out so the wrapper is a SpecModel for the type checker.
    def initial_states(self) -> Iterable[Any]:
        return self._model.initial_states()  # type: ignore[no-any-return]

    def successors(self, state: Any) -> Iterator[Any]:
        return iter(self._model.successors(state))

    def apply(self, state: Any, action: str, args: tuple[Hashable, ...]) -> Any:
        return self._model.apply(state, action, args)

    def explain(self, state: Any, action: str, args: tuple[Hashable, ...]) -> str:
        return self._model.explain(state, action, args)  # type: ignore[no-any-return]

    def action_names(self) -> Sequence[str]:
        return self._model.action_names()  # type: ignore[no-any-return]

    def unreachable_actions(self) -> frozenset[str]:
        return self._model.unreachable_actions()  # type: ignore[no-any-return]

    def fault_actions(self) -> frozenset[str]:
        return self._model.fault_actions()  # type: ignore[no-any-return]

    def invariants(self) -> Sequence[Any]:
        return self._model.invariants()  # type: ignore[no-any-return]

    def witnesses(self) -> Sequence[Any]:
        return self._model.witnesses()  # type: ignore[no-any-return]

    def pack(self, state: Any) -> tuple[Any, ...]:
        return self._model.pack(state)  # type: ignore[no-any-return]

    def canonicalize(self, state: Any) -> Any:
        return self._model.canonicalize(state)

    def within_bounds(self, state: Any) -> bool:
        return self._model.within_bounds(state)  # type: ignore[no-any-return]

    def quiescent_by_bound(self, state: Any) -> bool:
        return self._model.quiescent_by_bound(state)  # type: ignore[no-any-return]

    def is_terminal(self, state: Any) -> bool:
        terminal = getattr(self._model, "is_terminal", None)
        return bool(terminal(state)) if terminal is not None else False

    def recovered(self, state: Any) -> bool:
        return self._model.recovered(state)  # type: ignore[no-any-return]

    def describe(self, state: Any) -> Mapping[str, object]:
        return self._model.describe(state)  # type: ignore[no-any-return]
