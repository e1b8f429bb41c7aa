"""Bitstate hashing (SPIN's ``-DBITSTATE``, Holzmann's supertrace) for models past memory.

Instead of a fingerprint -> index table (≈ 115 B per state), the seen set is a bit array of
``2**log2_bits`` bits; a state is "seen" when all ``HASHES`` bits its 64-bit fingerprint selects
are set (double hashing: ``h1 + i * h2``). Memory is fixed in advance (``2**27`` bits =
16 MiB), plus the parent links kept for counterexamples (12 B per state).

The price is completeness: a new state whose bits all happen to be set already is wrongly
taken as seen and *omitted* with its successors (never a false alarm: every reported
violation is real and replays). With ``m`` bits, ``k`` hashes and ``n`` states stored, the
``n``-th new state is omitted with probability ``(1 - e**(-k n / m))**k`` (the table's false
positive rate then), and the expected number of omitted states is at most ``n`` times that.
SPIN reports the same figure as its "hash factor" ``m / n`` (coverage is good above ~100);
TLC, whose fingerprint set is exact up to 64-bit collisions, reports the collision bound
instead (:func:`~tent_models.checker.collision_probability_tlc`).
"""

from __future__ import annotations

import math

__all__ = ["HASHES", "BitSet", "omission_probability"]

HASHES = 3  # SPIN's default for -DBITSTATE is 3 (-k3)
_SEEN = -1  # what ``get`` returns for a state taken as seen: no index is kept


class BitSet:
    """A bit array seen-set with the mapping interface the BFS loop uses (``get``/set item).

    ``get(fp)`` is ``None`` for a new state and ``-1`` otherwise (the index is not stored);
    ``bitset[fp] = index`` sets the state's bits. ``len()`` counts insertions.
    """

    def __init__(self, log2_bits: int) -> None:
        if not 10 <= log2_bits <= 40:
            raise ValueError(f"log2_bits must be in 10..40, got {log2_bits}")
        self.log2_bits = log2_bits
        self.mask = (1 << log2_bits) - 1
        self.bits = bytearray(1 << max(log2_bits - 3, 0))
        self.stored = 0

    def _positions(self, fp: int) -> list[int]:
        h1, h2 = fp & self.mask, ((fp >> 32) | 1) & self.mask
        return [(h1 + i * h2) & self.mask for i in range(HASHES)]

    def get(self, fp: int) -> int | None:
        bits = self.bits
        for position in self._positions(fp):
            if not bits[position >> 3] & (1 << (position & 7)):
                return None
        return _SEEN

    def __contains__(self, fp: int) -> bool:
        return self.get(fp) is not None

    def __setitem__(self, fp: int, _index: int) -> None:
        bits = self.bits
        for position in self._positions(fp):
            bits[position >> 3] |= 1 << (position & 7)
        self.stored += 1

    def update(self, entries: object) -> None:
        for fp, index in entries:  # type: ignore[attr-defined]
            self[fp] = index

    def __len__(self) -> int:
        return self.stored

    def nbytes(self) -> int:
        return len(self.bits)


def omission_probability(stored: int, log2_bits: int, hashes: int = HASHES) -> float:
    """Probability that the last new state of a run was wrongly taken as seen."""
    m = float(1 << log2_bits)
    return (1.0 - math.exp(-hashes * stored / m)) ** hashes
