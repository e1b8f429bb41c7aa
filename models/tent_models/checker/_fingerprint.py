"""Stable 64-bit state fingerprints and the collision estimate TLC reports.

Policy:

1. A fingerprint is ``blake2b(marshal.dumps(packed, 2), digest_size=8)`` read as an unsigned
   little-endian integer. Python's ``hash()`` is not used: ``str`` hashes are salted per process
   and ``hash(-1) == hash(-2)``, so equal runs would not agree and structured states would collide.
2. Marshal format **2** is used on purpose: formats 3 and later emit back-references for objects
   shared inside the value, so two equal tuples built differently (a shared big int vs two equal
   copies) would serialise to different bytes.
3. With 64-bit fingerprints two distinct states collide with probability about
   ``n (n - 1) / 2**65`` for ``n`` distinct states (birthday bound, :func:`collision_probability`);
   TLC's "optimistic" figure ``n (generated - n) / 2**64`` is :func:`collision_probability_tlc`.
"""

from __future__ import annotations

import marshal
from collections.abc import Callable, Iterable
from hashlib import blake2b
from typing import Any

__all__ = [
    "collision_probability",
    "collision_probability_tlc",
    "expander",
    "fingerprint",
    "fingerprinter",
]

_MARSHAL_VERSION = 2  # no back-references: equal values give equal bytes (policy 2)


def fingerprint(packed: tuple[Any, ...]) -> int:
    """Return the stable 64-bit fingerprint of a packed state (a nested tuple of ints).

    Raises :class:`ValueError` if ``packed`` holds a value marshal cannot encode.
    """
    digest = blake2b(marshal.dumps(packed, _MARSHAL_VERSION), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def fingerprinter(model: Any) -> Callable[[Any], int]:
    """The state -> fingerprint function the checker uses for ``model``.

    A model may provide its own stable ``fingerprint(state)`` (the fast path of DESIGN's
    "compact encoding in the hot loop", e.g. hashing memoised per-component digests); it must
    then be a 64-bit value that depends only on the state's value, identical in every process,
    and equal exactly when ``pack`` is equal (up to 64-bit collisions). Otherwise it is
    ``fingerprint(model.pack(state))``.
    """
    own = getattr(model, "fingerprint", None)
    if callable(own):
        return own  # type: ignore[no-any-return]
    pack = model.pack

    def of(state: Any) -> int:
        return int.from_bytes(
            blake2b(marshal.dumps(pack(state), _MARSHAL_VERSION), digest_size=8).digest(), "little"
        )

    return of


Expansion = Iterable[tuple[str, tuple[Any, ...], Any, int]]


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
    if not symmetry:

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


def collision_probability(distinct_states: int) -> float:
    """Birthday-bound probability that two of ``distinct_states`` states share a fingerprint."""
    n = float(distinct_states)
    return n * max(n - 1.0, 0.0) / 2.0**65


def collision_probability_tlc(distinct_states: int, generated_states: int) -> float:
    """TLC's optimistic estimate: ``distinct * (generated - distinct) / 2**64``."""
    n = float(distinct_states)
    return n * max(float(generated_states) - n, 0.0) / 2.0**64
