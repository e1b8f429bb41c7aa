"""Stable 64-bit state fingerprints and the collision estimate TLC reports.

Policy:

1. A fingerprint is ``xxh3_64(marshal.dumps(packed, 2))`` (xxHash's XXH3, 64-bit, seed 0) as
   an unsigned integer: a stable non-cryptographic hash with good dispersion (it passes
   SMHasher), ~3× cheaper per state than the blake2b-64 used before, and nothing here needs
   resistance to an adversary choosing states. Python's ``hash()`` is not used: ``str``
   hashes are salted per process and ``hash(-1) == hash(-2)``, so equal runs would not agree
   and structured states would collide.
2. Marshal format **2** is used on purpose: formats 3 and later emit back-references for objects
   shared inside the value, so two equal tuples built differently (a shared big int vs two equal
   copies) would serialise to different bytes.
3. With 64-bit fingerprints two distinct states collide with probability about
   ``n (n - 1) / 2**65`` for ``n`` distinct states (birthday bound, :func:`collision_probability`);
   TLC's "optimistic" figure ``n (generated - n) / 2**64`` is :func:`collision_probability_tlc`.
4. A model may compute its own fingerprint instead (:mod:`._fastpath`); it must keep these
   properties: stable across processes, 64 bits, a collision probability of 2**-64 per pair.
"""

from __future__ import annotations

import marshal
from typing import Any

from xxhash import xxh3_64_intdigest

__all__ = ["collision_probability", "collision_probability_tlc", "fingerprint"]

_MARSHAL_VERSION = 2  # no back-references: equal values give equal bytes (policy 2)


def fingerprint(packed: tuple[Any, ...]) -> int:
    """Return the stable 64-bit fingerprint of a packed state (a nested tuple of ints).

    Raises :class:`ValueError` if ``packed`` holds a value marshal cannot encode.
    """
    return xxh3_64_intdigest(marshal.dumps(packed, _MARSHAL_VERSION))


def collision_probability(distinct_states: int) -> float:
    """Birthday-bound probability that two of ``distinct_states`` states share a fingerprint."""
    n = float(distinct_states)
    return n * max(n - 1.0, 0.0) / 2.0**65


def collision_probability_tlc(distinct_states: int, generated_states: int) -> float:
    """TLC's optimistic estimate: ``distinct * (generated - distinct) / 2**64``."""
    n = float(distinct_states)
    return n * max(float(generated_states) - n, 0.0) / 2.0**64
