"""The public face for checking a protocol of your own: a :class:`Model` base and decorators.

:class:`~tent_models.model_api.SpecModel` is what the checker talks to; a model written for it
directly needs every method spelled out. :class:`Model` supplies a default for each optional
one, so a small model states only its initial states, its actions, and its properties::

    class Lock(Model[tuple[str, ...]]):
        name = "lock"

        def initial_states(self):
            return [("idle", "idle")]

        @action(over=lambda self, s: range(len(s)))
        def acquire(self, s, p):
            return s[:p] + ("held",) + s[p + 1 :] if "held" not in s else None

        @invariant(cites="at most one holder")
        def OneHolder(self, s):
            return Verdict(s.count("held") <= 1, holders=s.count("held"))

Decorators (each on a method of a :class:`Model` subclass):

* :func:`action`: ``method(self, state, *args) -> next state | None`` (``None``: the guard is
  false). ``over(self, state)`` yields the argument values to try (a tuple per instance, or one
  plain value); without it the action takes no argument. ``fault=True`` marks a fault (disabled
  when the checker judges recoverability); ``unreachable=True`` declares that the action never
  fires under the model's bounds (coverage then fails if it does).
* :func:`invariant`: ``method(self, state) -> bool | Verdict``; ``cites`` is the rule it encodes.
  Return a :class:`Verdict` to have a counterexample print the values the invariant compared.
* :func:`witness`: ``method(self, state) -> bool``: some reachable state must satisfy it.

Defaults, each overridable: ``name`` (the class name), ``successors``/``apply``/``explain``
(from the actions), ``pack`` (a stable tagged-int encoding of ints, bools, strings, ``None``,
tuples and named tuples, frozensets, enums and frozen attrs or dataclass values),
``canonicalize`` (no symmetry), ``within_bounds`` (always), ``is_terminal`` (never: a state
without successors is a deadlock unless declared terminal), ``quiescent_by_bound`` (never),
``recovered`` (never; recoverability is judged only when a subclass overrides it) and
``describe`` (the fields of a named tuple / attrs / dataclass state, the items of a mapping,
the positions of a tuple, else ``{"state": state}``).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar, Generic, TypeVar

import attrs

from tent_models.model_api import Invariant, Step, Witness

__all__ = [
    "Model",
    "ModelActionError",
    "ModelDefinitionError",
    "Verdict",
    "action",
    "invariant",
    "witness",
]

S = TypeVar("S")
F = TypeVar("F", bound=Callable[..., Any])

_ACTION = "__tent_action__"
_INVARIANT = "__tent_invariant__"
_WITNESS = "__tent_witness__"


class ModelDefinitionError(TypeError):
    """A :class:`Model` subclass is declared wrongly (raised when the class is created)."""


class ModelActionError(RuntimeError):
    """An action of a :class:`Model` raised: which action, with which arguments, in which state.

    The original exception is its ``__cause__``. ``tent check`` reports it with the shortest
    path to ``state`` (diff-only, as a counterexample) and the model's own frames only.
    """

    def __init__(self, action: str, arguments: tuple[Hashable, ...], state: object) -> None:
        shown = ", ".join(repr(a) for a in arguments)
        super().__init__(f"action {action}({shown}) raised")
        self.action, self.arguments, self.state = action, arguments, state

    def __reduce__(self) -> tuple[Any, ...]:  # across checker processes: rebuild, keep the cause
        return (type(self), (self.action, self.arguments, self.state))


class Verdict:
    """An invariant's answer that carries what it compared: ``Verdict(a <= b, a=a, b=b)``.

    Truthy exactly when ``holds``; ``compared`` maps each name to the value the invariant read.
    A counterexample to an invariant returning one prints ``compared: a=3, b=2`` after the
    ``violated:`` line. Any object with ``__bool__`` and a ``compared`` mapping does the same,
    so a spec that cannot import this module can still provide the values.
    """

    __slots__ = ("compared", "holds")

    def __init__(self, holds: bool, /, **compared: object) -> None:
        self.holds = bool(holds)
        self.compared: Mapping[str, object] = MappingProxyType(compared)

    def __bool__(self) -> bool:
        return self.holds

    def __repr__(self) -> str:
        shown = ", ".join(f"{key}={value!r}" for key, value in self.compared.items())
        return f"Verdict({self.holds}{', ' if shown else ''}{shown})"


@attrs.frozen
class _ActionSpec:
    over: Callable[[Any, Any], Iterable[Any]] | None
    fault: bool
    unreachable: bool


def action(
    method: F | None = None,
    *,
    over: Callable[[Any, Any], Iterable[Any]] | None = None,
    fault: bool = False,
    unreachable: bool = False,
) -> Any:
    """Mark ``method(self, state, *args)`` as an action (usable bare, ``@action``, or called).

    See the module docstring for ``over``, ``fault`` and ``unreachable``.
    """

    def mark(function: F) -> F:
        setattr(function, _ACTION, _ActionSpec(over, fault, unreachable))
        return function

    return mark if method is None else mark(method)


def invariant(*, cites: str = "") -> Callable[[F], F]:
    """Mark ``method(self, state) -> bool | Verdict`` as a named safety invariant."""

    def mark(function: F) -> F:
        setattr(function, _INVARIANT, cites)
        return function

    return mark


def witness(method: F) -> F:
    """Mark ``method(self, state) -> bool`` as a "sometimes" witness (non-vacuity)."""
    setattr(method, _WITNESS, True)
    return method


def _arguments(value: Any) -> tuple[Hashable, ...]:
    return value if isinstance(value, tuple) else (value,)


def _pack(value: Any) -> tuple[Any, ...]:
    """A tagged, order-stable encoding as nested int tuples (equal exactly for equal values)."""
    if value is None:
        return (0,)
    if isinstance(value, bool):
        return (1, int(value))
    if isinstance(value, enum.Enum):
        return (6, *_pack(type(value).__qualname__), *_pack(value.value))
    if isinstance(value, int):
        return (2, value)
    if isinstance(value, str):
        return (3, *value.encode("utf-8"))
    if isinstance(value, tuple | list):
        return (4, len(value), *(_pack(element) for element in value))
    if isinstance(value, frozenset | set):
        return (5, len(value), *sorted(_pack(element) for element in value))
    if attrs.has(type(value)):
        return (7, *_pack(attrs.astuple(value, recurse=False)))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = tuple(getattr(value, f.name) for f in dataclasses.fields(value))
        return (7, *_pack(fields))
    raise TypeError(
        f"the default Model.pack cannot encode a {type(value).__name__}; use ints, bools, "
        "strings, None, tuples, frozensets, enums or frozen attrs/dataclass values, or override "
        "pack()"
    )


class Model(Generic[S]):
    """A checkable model with a default for every optional :class:`SpecModel` method.

    Subclasses define ``initial_states`` and either decorated actions or their own
    ``successors`` + ``apply`` + ``action_names``. A wrongly declared subclass raises
    :class:`ModelDefinitionError` when the class statement runs (a decorated action that is
    also an invariant, or a name used twice), never later inside a check.
    """

    name: str = ""
    _actions: ClassVar[Mapping[str, _ActionSpec]] = MappingProxyType({})
    _invariants: ClassVar[Mapping[str, str]] = MappingProxyType({})
    _witnesses: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        actions: dict[str, _ActionSpec] = {}
        invariants: dict[str, str] = {}
        witnesses: list[str] = []
        for klass in reversed(cls.__mro__):  # base classes first, then definition order
            for attr, value in vars(klass).items():
                marks = [m for m in (_ACTION, _INVARIANT, _WITNESS) if hasattr(value, m)]
                if len(marks) > 1:
                    raise ModelDefinitionError(
                        f"{cls.__name__}.{attr} is marked as more than one of action, invariant "
                        "and witness"
                    )
                if _ACTION in marks:
                    actions[attr] = getattr(value, _ACTION)
                elif _INVARIANT in marks:
                    invariants[attr] = getattr(value, _INVARIANT)
                elif _WITNESS in marks and attr not in witnesses:
                    witnesses.append(attr)
        cls._actions = MappingProxyType(actions)
        cls._invariants = MappingProxyType(invariants)
        cls._witnesses = tuple(witnesses)
        if not cls.__dict__.get("name"):
            cls.name = cls.__name__

    # --- required ---------------------------------------------------------------------------

    def initial_states(self) -> Iterable[S]:
        """Every initial state. A subclass must define it."""
        raise NotImplementedError(f"{type(self).__name__} must define initial_states()")

    # --- actions ------------------------------------------------------------------------------

    def _instances(self, state: S) -> Iterator[tuple[str, tuple[Hashable, ...]]]:
        for name, spec in self._actions.items():
            if spec.over is None:
                yield name, ()
            else:
                for value in spec.over(self, state):
                    yield name, _arguments(value)

    def successors(self, state: S) -> Iterator[Step]:
        """Every enabled instance of every decorated action, in declaration order."""
        for name, args in self._instances(state):
            try:
                nxt = getattr(self, name)(state, *args)
            except Exception as exc:  # a bug in the model: say where, keep the cause
                raise ModelActionError(name, args, state) from exc
            if nxt is not None:
                yield Step(name, args, nxt)

    def apply(self, state: S, action: str, args: tuple[Hashable, ...]) -> S | None:
        """The successor of one action instance, or ``None`` when it is not enabled.

        Arguments that ``over`` does not yield in ``state`` (a typo in a recorded trace, say)
        are not enabled either; the action's method never sees them.
        """
        spec = self._actions.get(action)
        if spec is None:
            return None
        args = tuple(args)
        if spec.over is None:
            if args:
                return None
        elif args not in {_arguments(v) for v in spec.over(self, state)}:
            return None
        result: S | None = getattr(self, action)(state, *args)
        return result

    def explain(self, state: S, action: str, args: tuple[Hashable, ...]) -> str:
        """Why ``apply`` returned ``None``, in words."""
        spec = self._actions.get(action)
        if spec is None:
            return f"{self.name} has no action {action!r} (actions: {', '.join(self._actions)})"
        if spec.over is None and args:
            return f"{action} takes no arguments, got {tuple(args)!r}"
        if spec.over is not None and tuple(args) not in {
            _arguments(v) for v in spec.over(self, state)
        }:
            return f"{action} is not offered the arguments {tuple(args)!r} in this state"
        return f"the guard of {action}{tuple(args)!r} is false in {self.describe(state)!r}"

    def action_names(self) -> Sequence[str]:
        """The decorated actions, in declaration order."""
        return tuple(self._actions)

    def unreachable_actions(self) -> frozenset[str]:
        """Actions declared with ``unreachable=True``."""
        return frozenset(n for n, spec in self._actions.items() if spec.unreachable)

    def fault_actions(self) -> frozenset[str]:
        """Actions declared with ``fault=True``."""
        return frozenset(n for n, spec in self._actions.items() if spec.fault)

    # --- properties ---------------------------------------------------------------------------

    def invariants(self) -> Sequence[Invariant]:
        """The decorated invariants, named after their methods, in declaration order."""
        return tuple(
            Invariant(name, cites, getattr(self, name)) for name, cites in self._invariants.items()
        )

    def witnesses(self) -> Sequence[Witness]:
        """The decorated witnesses, named after their methods, in declaration order."""
        return tuple(Witness(name, getattr(self, name)) for name in self._witnesses)

    # --- state handling -----------------------------------------------------------------------

    def pack(self, state: S) -> tuple[Any, ...]:
        """A stable nested-int encoding of ``state`` (see the module docstring).

        Raises ``TypeError`` for a value it cannot encode (then override ``pack``).
        """
        return _pack(state)

    def canonicalize(self, state: S) -> S:
        """No symmetry: the state itself. Override to return an orbit's representative."""
        return state

    def within_bounds(self, state: S) -> bool:
        """Every state is expanded."""
        return True

    def is_terminal(self, state: S) -> bool:
        """No state is terminal: a state without successors is a deadlock.

        Override it for a protocol that finishes (a commit decided and learnt, a transfer
        completed): a state it returns True for may have no successor without being a deadlock.
        The checker still judges invariants there; only the deadlock check skips it.
        """
        return False

    def quiescent_by_bound(self, state: S) -> bool:
        """No state is quiescent by bound: a state without successors is a deadlock.

        Override it for a state a model's bounds stop (a message budget spent), not one where
        the protocol itself is done: that is :meth:`is_terminal`.
        """
        return False

    def recovered(self, state: S) -> bool:
        """No recovery goal: never recovered (and recoverability is not judged)."""
        return False

    @property
    def declares_recovery(self) -> bool:
        """True when the subclass overrides :meth:`recovered` (the checker reads this)."""
        return type(self).recovered is not Model.recovered

    def describe(self, state: S) -> Mapping[str, object]:
        """A flat ``field -> value`` view for diff-only counterexamples."""
        if isinstance(state, tuple) and hasattr(state, "_asdict"):
            return dict(state._asdict())
        if attrs.has(type(state)):
            return attrs.asdict(state, recurse=False)  # type: ignore[arg-type]
        if dataclasses.is_dataclass(state) and not isinstance(state, type):
            return {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
        if isinstance(state, Mapping):
            return {str(key): value for key, value in state.items()}
        if isinstance(state, tuple):
            return {f"[{index}]": value for index, value in enumerate(state)}
        return {"state": state}
