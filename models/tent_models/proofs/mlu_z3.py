"""z3 proofs of the MLU predictor's properties (docs/semantics.md#mlu).

``deadline_mlu(bytes_ahead, length, deadline_ns, now_ns, bandwidth_bps)`` is encoded twice, from
docs/semantics.md#mlu and not from the implementation:

* **over the reals** (:func:`real_mlu`): the piecewise definition with the exact quotient
  ``(bytes_ahead + length) · 1e9 / (bandwidth · (deadline − now))`` and ``DBL_MAX`` as a constant.
  The order properties and the threshold characterisation are proved here, for *all* real inputs
  in the stated domain (which contains every integer input the library accepts).
* **in IEEE binary64 with round-to-nearest-even** (:func:`fp_mlu`): the exact float64 operation
  order ``((b + l) / bw) / ((d − n) / 1e9)`` with ``fpDiv``, the integers converted to FP exactly
  (they are below 2**53). :func:`z3_mlu_value` evaluates it for concrete inputs; a Hypothesis test
  checks it bit for bit against ``tent_spec.mlu.deadline_mlu``, including ``mlu == θ``. The
  edge rules (no deadline or no bandwidth never drops, past due always drops) are proved in FP64.

What is *not* proved by z3, stated precisely: monotonicity of the FP64 value itself. z3's FP
decision procedure bit-blasts ``fpDiv``; the query "a1 ≤ a2 ⇒ fpDiv(a1, c) ≤ fpDiv(a2, c)" times
out after 60 s even for binary16. It follows from IEEE 754 §4.3 (each operation is the exact
result, rounded; rounding to nearest is monotone) combined with the real monotonicity proved here
(every intermediate quotient is monotone in its argument), and the tests check it on random and
adjacent (``math.nextafter``) inputs.

Every proof returns a :class:`~tent_models.proofs.credit_z3.ProofResult`; ``per_action`` maps
each proof obligation to whether it holds and ``cti`` is a counterexample (the model's values)
when one does not.
"""

from __future__ import annotations

import math
import struct
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import z3

from tent_models.checker import InvalidArgument
from tent_models.proofs.credit_z3 import ProofResult

__all__ = [
    "DBL_MAX",
    "EXACT_LIMIT",
    "fp_mlu",
    "prove_all",
    "prove_antitone_in_window",
    "prove_fp_no_deadline_or_bandwidth_never_dropped",
    "prove_fp_past_due_always_dropped",
    "prove_monotone_in_bytes_ahead",
    "prove_monotone_in_length",
    "prove_no_deadline_or_bandwidth_never_dropped",
    "prove_past_due_dominates_finite",
    "prove_threshold_characterisation",
    "prove_valid",
    "real_mlu",
    "render",
    "z3_drops",
    "z3_mlu_value",
]

DBL_MAX = sys.float_info.max
#: Integers below this convert to binary64 exactly, so the FP encoding matches Python's ``/``.
EXACT_LIMIT = 2**53
#: Upper bound of the real-valued domain: u64 byte counts and times (docs/semantics.md "u64
#: counters").
U64_LIMIT = 2**64

_FLOAT64 = z3.Float64()
_RNE = z3.RNE()
_QUERY_TIMEOUT_MS = 30_000

Term = Any  # a z3 expression (z3 ships no type information)


# --- the two encodings -------------------------------------------------------------------------


def real_mlu(bytes_ahead: Term, length: Term, deadline: Term, now: Term, bandwidth: Term) -> Term:
    """The MLU over the reals: docs/semantics.md#mlu with the exact quotient.

    1. ``deadline == 0`` or ``bandwidth <= 0`` → 0 (checked first);
    2. ``deadline <= now`` → ``DBL_MAX``;
    3. otherwise ``(bytes_ahead + length) · 1e9 / (bandwidth · (deadline − now))``.
    """
    ratio = (bytes_ahead + length) * 10**9 / (bandwidth * (deadline - now))
    return z3.If(
        z3.Or(deadline == 0, bandwidth <= 0),
        z3.RealVal(0),
        z3.If(deadline <= now, z3.RealVal(DBL_MAX), ratio),
    )


def fp_mlu(total_bytes: Term, window_ns: Term, bandwidth: Term) -> Term:
    """The float64 ratio ``((b + l) / bw) / ((d − n) / 1e9)`` in that operation order, RNE.

    ``total_bytes`` (``b + l``) and ``window_ns`` (``d − n``) are FP64 terms holding integers
    (exact below 2**53), ``bandwidth`` an FP64 term. The piecewise edge cases are added by
    :func:`_fp_piecewise`.
    """
    per_second = z3.fpDiv(_RNE, total_bytes, bandwidth)
    window_s = z3.fpDiv(_RNE, window_ns, z3.FPVal(1e9, _FLOAT64))
    return z3.fpDiv(_RNE, per_second, window_s)


def _fp_piecewise(
    deadline_is_zero: Term, deadline_passed: Term, total: Term, window: Term, bandwidth: Term
) -> Term:
    """docs/semantics.md#mlu in FP64: no deadline or bandwidth ≤ 0 → +0.0; past due → DBL_MAX."""
    no_bandwidth = z3.fpLEQ(bandwidth, z3.FPVal(0.0, _FLOAT64))
    return z3.If(
        z3.Or(deadline_is_zero, no_bandwidth),
        z3.FPVal(0.0, _FLOAT64),
        z3.If(deadline_passed, z3.FPVal(DBL_MAX, _FLOAT64), fp_mlu(total, window, bandwidth)),
    )


def z3_mlu_value(
    bytes_ahead: int, length: int, deadline_ns: int, now_ns: int, bandwidth_bps: float
) -> float:
    """Evaluate the FP64 encoding for concrete inputs and return the float it denotes.

    Raises :class:`~tent_models.checker.InvalidArgument` when an input is outside the exactly
    representable domain (``0 <= bytes_ahead + length < 2**53``, ``|deadline_ns - now_ns| <
    2**53``, ``deadline_ns >= 0``, finite bandwidth), where float64 conversion would round.
    """
    total = bytes_ahead + length
    window = deadline_ns - now_ns
    if bytes_ahead < 0 or length < 0 or not total < EXACT_LIMIT:
        raise InvalidArgument("bytes_ahead and length must be >= 0 with a sum below 2**53")
    if deadline_ns < 0 or not abs(window) < EXACT_LIMIT:
        raise InvalidArgument("deadline_ns must be >= 0 and |deadline_ns - now_ns| below 2**53")
    if not math.isfinite(bandwidth_bps):
        raise InvalidArgument("bandwidth_bps must be finite")
    term = _fp_piecewise(
        z3.BoolVal(deadline_ns == 0),
        z3.BoolVal(deadline_ns <= now_ns),
        z3.FPVal(float(total), _FLOAT64),
        z3.FPVal(float(window), _FLOAT64),
        z3.FPVal(float(bandwidth_bps), _FLOAT64),
    )
    bits = z3.simplify(z3.fpToIEEEBV(term))
    value: float = struct.unpack("<d", struct.pack("<Q", bits.as_long()))[0]
    return value


def z3_drops(
    bytes_ahead: int,
    length: int,
    deadline_ns: int,
    now_ns: int,
    bandwidth_bps: float,
    *,
    threshold: float,
) -> bool:
    """The drop decision ``fpGEQ(mlu, θ)`` evaluated in the FP64 encoding.

    Deadline Scheduling, "Deadline-Infeasible Drop": "if the value reaches θ_local". Raises like
    :func:`z3_mlu_value`, and for a non-finite threshold."""
    if not math.isfinite(threshold):
        raise InvalidArgument("threshold must be finite")
    mlu = z3.FPVal(z3_mlu_value(bytes_ahead, length, deadline_ns, now_ns, bandwidth_bps), _FLOAT64)
    decision: bool = z3.is_true(z3.simplify(z3.fpGEQ(mlu, z3.FPVal(threshold, _FLOAT64))))
    return decision


# --- proof plumbing ------------------------------------------------------------------------------


def render(value: Term) -> str:
    """A model value for a counterexample: ``DBL_MAX`` by name, numbers as z3 prints them."""
    if z3.is_rational_value(value) and value.eq(z3.RealVal(DBL_MAX)):
        return "DBL_MAX"
    return str(value)


def prove_valid(
    name: str, obligations: Mapping[str, Callable[[], tuple[Term, Mapping[str, Term]]]]
) -> ProofResult:
    """Prove every obligation (a formula that must be valid, and the terms shown in a CTI).

    Each formula is checked by asking z3 for a model of its negation: ``unsat`` proves it,
    ``sat`` yields the counterexample, ``unknown`` (timeout) counts as not proved.
    """
    start = time.perf_counter()
    per_action: dict[str, bool] = {}
    cti: Mapping[str, Any] | None = None
    for obligation, build in obligations.items():
        formula, shown = build()
        solver = z3.Solver()
        solver.set("timeout", _QUERY_TIMEOUT_MS)
        solver.add(z3.Not(formula))
        verdict = solver.check()
        per_action[obligation] = verdict == z3.unsat
        if verdict == z3.sat and cti is None:
            model = solver.model()
            cti = {
                "kind": "counterexample",
                "obligation": obligation,
                "values": {
                    k: render(model.eval(v, model_completion=True)) for k, v in shown.items()
                },
            }
        elif verdict == z3.unknown and cti is None:
            cti = {"kind": "unknown", "obligation": obligation, "reason": solver.reason_unknown()}
    return ProofResult(
        name=name,
        holds=all(per_action.values()),
        per_action=per_action,
        cti=cti,
        seconds=time.perf_counter() - start,
    )


def _domain(b: Term, ln: Term, d: Term, n: Term, bw: Term) -> Term:
    """Inputs the library accepts: u64 bytes and times, a non-negative length, a finite rate.

    The times are integers (``Int``), so a deadline ahead is at least 1 ns ahead; bytes and the
    bandwidth range over the reals (a superset of every integer or float input). The bandwidth
    of a usable provider is at least 1 B/s, which keeps the ratio far below ``DBL_MAX``.
    """
    return z3.And(
        b >= 0,
        b < U64_LIMIT,
        ln >= 0,
        ln < U64_LIMIT,
        d >= 0,
        d < U64_LIMIT,
        n >= 0,
        n < U64_LIMIT,
        z3.Or(bw <= 0, bw >= 1),
        bw < U64_LIMIT,
    )


def _inputs(suffix: str = "") -> tuple[Term, Term, Term, Term, Term]:
    b, ln, bw = z3.Reals(f"bytes_ahead{suffix} length{suffix} bandwidth{suffix}")
    d, n = z3.Ints(f"deadline{suffix} now{suffix}")
    return b, ln, d, n, bw


# --- real-valued properties --------------------------------------------------------------------


def prove_monotone_in_bytes_ahead() -> ProofResult:
    """``b1 ≤ b2 ⇒ mlu(b1, …) ≤ mlu(b2, …)``: more bytes ahead never make a request less urgent."""

    def build() -> tuple[Term, Mapping[str, Term]]:
        b, ln, d, n, bw = _inputs()
        b2 = z3.Real("bytes_ahead2")
        premise = z3.And(_domain(b, ln, d, n, bw), _domain(b2, ln, d, n, bw), b <= b2)
        formula = z3.Implies(premise, real_mlu(b, ln, d, n, bw) <= real_mlu(b2, ln, d, n, bw))
        return formula, {"b1": b, "b2": b2, "length": ln, "deadline": d, "now": n, "bw": bw}

    return prove_valid("mlu/monotone_in_bytes_ahead", {"real": build})


def prove_monotone_in_length() -> ProofResult:
    """``l1 ≤ ln2 ⇒ mlu(…, l1, …) ≤ mlu(…, ln2, …)``: a longer request is never less urgent."""

    def build() -> tuple[Term, Mapping[str, Term]]:
        b, ln, d, n, bw = _inputs()
        ln2 = z3.Real("length2")
        premise = z3.And(_domain(b, ln, d, n, bw), _domain(b, ln2, d, n, bw), ln <= ln2)
        formula = z3.Implies(premise, real_mlu(b, ln, d, n, bw) <= real_mlu(b, ln2, d, n, bw))
        return formula, {"b": b, "l1": ln, "ln2": ln2, "deadline": d, "now": n, "bw": bw}

    return prove_valid("mlu/monotone_in_length", {"real": build})


def prove_antitone_in_window() -> ProofResult:
    """A wider window never raises the MLU, across the past-due boundary too.

    With a deadline and usable bandwidth, for ``now`` fixed: ``d1 ≤ d2 ⇒ mlu(d1) ≥ mlu(d2)``
    (``d ≤ now`` gives ``DBL_MAX``, which every finite ratio stays below); the same for the
    clock: ``n1 ≤ n2 ⇒ mlu(n1) ≤ mlu(n2)`` (time passing never lowers urgency).
    """

    def by_deadline() -> tuple[Term, Mapping[str, Term]]:
        b, ln, d, n, bw = _inputs()
        d2 = z3.Int("deadline2")
        premise = z3.And(
            _domain(b, ln, d, n, bw), _domain(b, ln, d2, n, bw), d != 0, d2 != 0, d <= d2
        )
        formula = z3.Implies(premise, real_mlu(b, ln, d, n, bw) >= real_mlu(b, ln, d2, n, bw))
        return formula, {"b": b, "l": ln, "d1": d, "d2": d2, "now": n, "bw": bw}

    def by_clock() -> tuple[Term, Mapping[str, Term]]:
        b, ln, d, n, bw = _inputs()
        n2 = z3.Int("now2")
        premise = z3.And(_domain(b, ln, d, n, bw), _domain(b, ln, d, n2, bw), n <= n2)
        formula = z3.Implies(premise, real_mlu(b, ln, d, n, bw) <= real_mlu(b, ln, d, n2, bw))
        return formula, {"b": b, "l": ln, "deadline": d, "n1": n, "n2": n2, "bw": bw}

    return prove_valid("mlu/antitone_in_window", {"deadline": by_deadline, "clock": by_clock})


def prove_threshold_characterisation() -> ProofResult:
    """For positive inputs and a deadline ahead: ``mlu ≥ θ ⟺ (b + ln)·1e9 ≥ θ·bw·(d − n)``.

    The drop decision needs no division: this is the form to reason about thresholds with.
    """

    def build() -> tuple[Term, Mapping[str, Term]]:
        b, ln, d, n, bw = _inputs()
        theta = z3.Real("theta")
        premise = z3.And(_domain(b, ln, d, n, bw), d > n, n >= 0, bw > 0, theta > 0)
        formula = z3.Implies(
            premise,
            (real_mlu(b, ln, d, n, bw) >= theta) == ((b + ln) * 10**9 >= theta * bw * (d - n)),
        )
        return formula, {"b": b, "l": ln, "deadline": d, "now": n, "bw": bw, "theta": theta}

    return prove_valid("mlu/threshold_characterisation", {"real": build})


def prove_no_deadline_or_bandwidth_never_dropped() -> ProofResult:
    """No deadline or bandwidth ≤ 0 → MLU 0, so ``mlu ≥ θ`` is false for every θ > 0."""

    def build() -> tuple[Term, Mapping[str, Term]]:
        b, ln, d, n, bw = _inputs()
        theta = z3.Real("theta")
        premise = z3.And(_domain(b, ln, d, n, bw), z3.Or(d == 0, bw <= 0), theta > 0)
        mlu = real_mlu(b, ln, d, n, bw)
        return z3.Implies(premise, z3.And(mlu == 0, z3.Not(mlu >= theta))), {
            "deadline": d,
            "bw": bw,
            "theta": theta,
        }

    return prove_valid("mlu/no_deadline_or_bandwidth_never_dropped", {"real": build})


def prove_past_due_dominates_finite() -> ProofResult:
    """Past due (deadline ≤ now, with a deadline and bandwidth) → DBL_MAX, at least every finite
    θ and strictly above every ratio of a deadline still ahead (within the domain)."""

    def build() -> tuple[Term, Mapping[str, Term]]:
        b, ln, d, n, bw = _inputs()
        b2, ln2 = z3.Reals("bytes_ahead2 length2")
        d2 = z3.Int("deadline2")
        theta = z3.Real("theta")
        premise = z3.And(
            _domain(b, ln, d, n, bw),
            _domain(b2, ln2, d2, n, bw),
            d != 0,
            d <= n,
            bw > 0,
            d2 > n,
            theta <= DBL_MAX,
        )
        past_due = real_mlu(b, ln, d, n, bw)
        ahead = real_mlu(b2, ln2, d2, n, bw)
        return z3.Implies(premise, z3.And(past_due >= theta, past_due > ahead)), {
            "deadline": d,
            "now": n,
            "deadline2": d2,
            "theta": theta,
        }

    return prove_valid("mlu/past_due_dominates_finite", {"real": build})


# --- FP64 properties ---------------------------------------------------------------------------


def _fp_inputs() -> tuple[Term, Term, Term, Term, Term, Term]:
    deadline_is_zero, deadline_passed = z3.Bools("deadline_is_zero deadline_passed")
    total, window, bandwidth, theta = z3.FPs("total window bandwidth theta", _FLOAT64)
    return deadline_is_zero, deadline_passed, total, window, bandwidth, theta


def _finite(x: Term) -> Term:
    return z3.Not(z3.Or(z3.fpIsNaN(x), z3.fpIsInf(x)))


def prove_fp_no_deadline_or_bandwidth_never_dropped() -> ProofResult:
    """FP64: no deadline or bandwidth ≤ 0 gives +0.0 and ``fpGEQ(mlu, θ)`` is false for θ > 0,
    whatever the other inputs (NaN and infinities included)."""

    def build() -> tuple[Term, Mapping[str, Term]]:
        zero, passed, total, window, bandwidth, theta = _fp_inputs()
        mlu = _fp_piecewise(zero, passed, total, window, bandwidth)
        premise = z3.And(
            z3.Or(zero, z3.fpLEQ(bandwidth, z3.FPVal(0.0, _FLOAT64))),
            z3.fpGT(theta, z3.FPVal(0.0, _FLOAT64)),
        )
        formula = z3.Implies(premise, z3.And(z3.fpIsZero(mlu), z3.Not(z3.fpGEQ(mlu, theta))))
        return formula, {"deadline_is_zero": zero, "bandwidth": bandwidth, "theta": theta}

    return prove_valid("mlu/fp_no_deadline_or_bandwidth_never_dropped", {"fp64": build})


def prove_fp_past_due_always_dropped() -> ProofResult:
    """FP64: a past-due owner with a deadline and bandwidth > 0 gets DBL_MAX, and ``fpGEQ(mlu,
    θ)`` holds for every finite θ (the reference compares DBL_MAX, not ``inf``)."""

    def build() -> tuple[Term, Mapping[str, Term]]:
        zero, passed, total, window, bandwidth, theta = _fp_inputs()
        mlu = _fp_piecewise(zero, passed, total, window, bandwidth)
        premise = z3.And(
            z3.Not(zero),
            passed,
            z3.fpGT(bandwidth, z3.FPVal(0.0, _FLOAT64)),
            _finite(theta),
        )
        formula = z3.Implies(premise, z3.And(_finite(mlu), z3.fpGEQ(mlu, theta)))
        return formula, {"bandwidth": bandwidth, "theta": theta}

    return prove_valid("mlu/fp_past_due_always_dropped", {"fp64": build})


def prove_all() -> tuple[ProofResult, ...]:
    """Every MLU proof of this module, in a stable order."""
    return (
        prove_monotone_in_bytes_ahead(),
        prove_monotone_in_length(),
        prove_antitone_in_window(),
        prove_threshold_characterisation(),
        prove_no_deadline_or_bandwidth_never_dropped(),
        prove_past_due_dominates_finite(),
        prove_fp_no_deadline_or_bandwidth_never_dropped(),
        prove_fp_past_due_always_dropped(),
    )
