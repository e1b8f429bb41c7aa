"""Per-component memoisation for any model whose state is a record of components.

The credit spec's hand-written fast path memoises each sender's steps because a sender's
actions read and write only its own part of the state. This module derives that trick for any
model that *declares* it, so a readable model (frozen dataclasses, frozensets, one guard and
effect per action) gets it without writing a fast path. A model opts in with two optional
methods (:class:`~tent_models.model_api.SpecModel` documents them):

* ``footprints() -> Mapping[action, Footprint(reads, writes)]``: the top-level fields of the
  state (a frozen dataclass or a ``NamedTuple``) each action reads and writes;
* ``action_successors(state, action)``: the steps of that one action; chained over
  ``action_names()`` they must be ``successors(state)``, in the same order.

Policy:

1. Each component value is interned (one shared object per value per field) and given a
   64-bit digest ``xxh3_64(marshal((field index, encode(value))))`` of a canonical, injective
   encoding of its value (:func:`encode`), once per distinct value.
2. The steps of action ``a`` in a state are memoised per (``a``, the interned read
   components): a hit rebuilds each successor from the state's components with the memoised
   written ones. On a miss ``action_successors`` runs and every field outside ``writes`` must
   come back unchanged (else :class:`ModelContractError`); reads cannot be checked, which is
   what ``tent check --plain`` (the model without these methods) cross-checks.
3. A state's fingerprint is the sum of its components' digests mod 2**64 (AdHash): a
   function of the state's value alone, identical in every process, and a successor's is its
   parent's plus the memoised difference of the written components' digests. Two distinct
   states differ in some field, whose digest enters the difference of their sums with
   coefficient 1: modelling xxh3 as a random function they collide with probability 2**-64,
   the figure the checker reports (Bellare and Micciancio, "A New Paradigm for
   Collision-free Hashing", 1997; the credit spec's fast path uses the same construction).
5. A model whose ``canonicalize`` is :func:`~tent_models.model_api.no_symmetry` (or a run
   without symmetry) gets successors as :class:`Deferred` values, built only when new.
4. Memo tables are cleared when they reach :data:`MEMO_LIMIT` entries (bounded memory; each
   entry holds the objects whose ids key it, so a cleared or stale id never aliases).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from functools import partial
from marshal import dumps
from typing import Any

from xxhash import xxh3_64_intdigest

from tent_models.checker._errors import ModelContractError

__all__ = [
    "COMPONENT_METHODS",
    "MEMO_LIMIT",
    "ComponentEngine",
    "Deferred",
    "encode",
    "has_components",
    "materialise",
]

COMPONENT_METHODS = ("footprints", "action_successors")
MEMO_LIMIT = 1 << 18
_MASK64 = (1 << 64) - 1

_SCALARS = (int, str, bytes, float, type(None))


def has_components(model: Any) -> bool:
    """True when ``model`` declares footprints and per-action successors."""
    return all(callable(getattr(model, name, None)) for name in COMPONENT_METHODS)


def encode(value: Any) -> Any:
    """A canonical nested tuple for ``value`` that marshal serialises deterministically.

    Injective on the values a state may hold: every container is tagged (tuple 0, frozenset
    1, record 2 with its qualified class name), frozenset members are sorted by their encoded
    bytes (iteration order is not part of a set's value), bools stay bools. Raises
    :class:`ModelContractError` for a value of another type.
    """
    kind = type(value)
    if kind is bool or kind in _SCALARS:
        return value
    if kind is tuple:
        return (0, *(encode(item) for item in value))
    if kind is frozenset:
        members = sorted((encode(item) for item in value), key=lambda item: dumps(item, 2))
        return (1, *members)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return (2, kind.__qualname__, *(encode(getattr(value, f.name)) for f in fields))
    if isinstance(value, tuple) and hasattr(kind, "_fields"):  # a NamedTuple
        return (2, kind.__qualname__, *(encode(item) for item in value))
    if isinstance(value, int):  # IntEnum, IntFlag
        return int(value)
    raise ModelContractError(f"cannot encode a state component of type {kind.__qualname__}")


class ComponentEngine:
    """The memoised ``expand`` and ``fingerprint`` for one component model (policy above)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        footprints = model.footprints()
        self.actions: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []
        for name in model.action_names():
            if name not in footprints:
                raise ModelContractError(f"model {model.name!r}: no footprint for {name!r}")
            reads, writes = footprints[name]
            self.actions.append((name, tuple(reads), tuple(writes)))
        self.state_type: type | None = None
        self.fields: tuple[str, ...] = ()
        self.build: Callable[[list[Any]], Any] = tuple
        # per action in order: (group, member, name, writes, writes among reads)
        self.plan: list[tuple[int, int, str, tuple[int, ...], bool]] = []
        # actions that read the same fields share one memo table (one lookup per state)
        self.groups: list[tuple[tuple[int, ...], list[tuple[str, tuple[int, ...], bool]]]] = []
        # per slot: value -> interned object; id -> (object, interned, slot digest)
        self.by_value: list[dict[Any, Any]] = []
        self.known: list[dict[int, tuple[Any, Any, int]]] = []
        # per group: ids of the read components -> (steps per member action, *read objects)
        self.memo: list[dict[Any, tuple[Any, ...]]] = []

    # ---- the state's shape --------------------------------------------------------------

    def _learn(self, state: Any) -> None:
        kind = type(state)
        if isinstance(state, tuple) and hasattr(kind, "_fields"):
            self.fields = tuple(kind._fields)
            new = tuple.__new__

            def build_tuple(values: list[Any]) -> Any:
                return new(kind, values)

            self.build = build_tuple
        elif dataclasses.is_dataclass(state) and not isinstance(state, type):
            fields = dataclasses.fields(state)
            if not all(f.init for f in fields):
                raise ModelContractError("a component state's dataclass fields must all be init")
            self.fields = names = tuple(f.name for f in fields)
            plain = hasattr(state, "__dict__") and not hasattr(kind, "__post_init__")
            new_object, set_attribute = object.__new__, object.__setattr__

            def build_record(values: list[Any]) -> Any:
                if not plain:
                    return kind(*values)
                # what the generated __init__ does, without its per-field frozen setattr
                record = new_object(kind)
                set_attribute(record, "__dict__", dict(zip(names, values, strict=True)))
                return record

            self.build = build_record
        else:
            raise ModelContractError(
                f"model {self.model.name!r}: footprints need a dataclass or NamedTuple state, "
                f"got {kind.__qualname__}"
            )
        index = {name: i for i, name in enumerate(self.fields)}
        for name, reads, writes in self.actions:
            unknown = [f for f in (*reads, *writes) if f not in index]
            if unknown:
                raise ModelContractError(f"footprint of {name!r} names unknown fields {unknown}")
            read_slots = tuple(sorted({index[f] for f in reads}))
            write_slots = tuple(index[f] for f in writes)
            local = set(writes) <= set(reads)
            group = next((g for g, (r, _) in enumerate(self.groups) if r == read_slots), None)
            if group is None:
                group = len(self.groups)
                self.groups.append((read_slots, []))
            members = self.groups[group][1]
            self.plan.append((group, len(members), name, write_slots, local))
            members.append((name, write_slots, local))
        self.memo = [{} for _ in self.groups]
        self.by_value = [{} for _ in self.fields]
        self.known = [{} for _ in self.fields]
        self.state_type = kind

    def _parts(self, state: Any) -> list[tuple[Any, Any, int]]:
        """``(object, interned, slot digest)`` of each component of ``state``."""
        if type(state) is not self.state_type:
            if self.state_type is None:
                self._learn(state)
            else:
                raise ModelContractError(
                    f"model {self.model.name!r}: a state of type {type(state).__qualname__}"
                )
        out = []
        for slot, name in enumerate(self.fields):
            value = getattr(state, name)
            entry = self.known[slot].get(id(value))
            if entry is None or entry[0] is not value:
                entry = self._intern(slot, value)
            out.append(entry)
        return out

    def _intern(self, slot: int, value: Any, alias: bool = True) -> tuple[Any, Any, int]:
        """``(value, interned, digest)``; with ``alias`` the id of ``value`` itself is
        remembered too (a state from outside, looked up again), which keeps it alive."""
        by_value, known = self.by_value[slot], self.known[slot]
        if len(by_value) >= MEMO_LIMIT:
            by_value.clear()
        if len(known) >= MEMO_LIMIT:
            known.clear()
        shared = by_value.setdefault(value, value)
        entry = known.get(id(shared))
        if entry is None or entry[0] is not shared:
            entry = (shared, shared, xxh3_64_intdigest(dumps((slot, encode(shared)), 2)))
            known[id(shared)] = entry
        if shared is not value:
            entry = (value, shared, entry[2])
            if alias:
                known[id(value)] = entry
        return entry

    # ---- the hot loop -------------------------------------------------------------------

    def fingerprint(self, state: Any) -> int:
        return sum(part[2] for part in self._parts(state)) & _MASK64

    def expand(self, state: Any, canonicalize: Callable[[Any], Any] | None) -> Iterator[Any]:
        """``(action, args, next, fingerprint(next))`` for every step, ``successors`` order;
        ``next`` is canonicalised when ``canonicalize`` is given, and a :class:`Deferred`
        (built on demand: most successors are seen before) when there is nothing to
        canonicalise."""
        parts = self._parts(state)
        shared = [part[1] for part in parts]
        digests = [part[2] for part in parts]
        total = sum(digests)
        ids = [id(value) for value in shared]
        memo, build, fingerprint = self.memo, self.build, self.fingerprint
        pick = ids.__getitem__
        found = []
        for group, (reads, members) in enumerate(self.groups):
            key = ids[reads[0]] if len(reads) == 1 else tuple(map(pick, reads))
            table = memo[group]
            entry = table.get(key)
            if entry is None:
                # The entry holds the read components, so their ids stay theirs while it lives.
                entry = (
                    tuple(
                        self._miss(state, name, writes, digests if local else None)
                        for name, writes, local in members
                    ),
                    *(shared[i] for i in reads),
                )
                if len(table) >= MEMO_LIMIT:
                    table.clear()
                table[key] = entry
            found.append(entry[0])
        for group, member, name, writes, _local in self.plan:
            for args, written, fixed in found[group][member]:
                if fixed is None:  # written fields outside the reads: their digests vary
                    fp = total + sum(e[2] for e in written) - sum(digests[i] for i in writes)
                    fp &= _MASK64
                else:
                    fp = (total + fixed) & _MASK64
                if canonicalize is None:
                    yield name, args, Deferred(_assemble, build, shared, writes, written), fp
                    continue
                values = shared.copy()
                for i, item in zip(writes, written, strict=True):
                    values[i] = item[1]
                nxt = build(values)
                canonical = canonicalize(nxt)
                if canonical is not nxt:  # another representative: its own components
                    yield name, args, canonical, fingerprint(canonical)
                else:
                    yield name, args, nxt, fp

    def _miss(
        self, state: Any, name: str, writes: tuple[int, ...], digests: list[int] | None
    ) -> tuple[tuple[tuple[Any, ...], tuple[tuple[Any, Any, int], ...], int | None], ...]:
        """The memo entry of one action: per step its args, the interned written components
        and, when ``digests`` (of ``state``; given when the writes are among the reads) fix
        them, the fingerprint delta."""
        fields = self.fields
        kept = [i for i in range(len(fields)) if i not in writes]
        steps = []
        for action, args, nxt in self.model.action_successors(state, name):
            if action != name or type(nxt) is not self.state_type:
                raise ModelContractError(
                    f"model {self.model.name!r}: action_successors(state, {name!r}) yielded "
                    f"{action!r} with a {type(nxt).__qualname__}"
                )
            for i in kept:
                before, after = getattr(state, fields[i]), getattr(nxt, fields[i])
                if after is not before and after != before:
                    raise ModelContractError(
                        f"model {self.model.name!r}: {name}{tuple(args)!r} changed "
                        f"{fields[i]!r}, outside its footprint"
                    )
            written = tuple(self._intern(i, getattr(nxt, fields[i]), alias=False) for i in writes)
            delta = None
            if digests is not None:
                delta = sum(e[2] for e in written) - sum(digests[i] for i in writes)
            steps.append((tuple(args), written, delta))
        return tuple(steps) if steps else ()


def _assemble(
    build: Callable[[list[Any]], Any],
    shared: list[Any],
    writes: tuple[int, ...],
    written: tuple[tuple[Any, Any, int], ...],
) -> Any:
    values = shared.copy()
    for i, item in zip(writes, written, strict=True):
        values[i] = item[1]
    return build(values)


class Deferred(partial):  # type: ignore[type-arg]
    """A successor not built yet: ``deferred()`` builds it (once per new state, in the
    checker's loop); the components are the expanded state's with the written ones replaced.
    A ``functools.partial`` of the assembly, so making one per step runs no Python code."""

    __slots__ = ()


def materialise(state: Any) -> Any:
    """``state`` itself, or the successor a :class:`Deferred` stands for."""
    return state() if state.__class__ is Deferred else state
