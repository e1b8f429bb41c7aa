"""Plain-text rendering of a :class:`CheckResult` (the CLI adds colour and tables on top)."""

from __future__ import annotations

from tent_models.checker._result import CheckResult, CounterExample, ViolationKind
from tent_models.checker._trace import format_trace

__all__ = ["format_counterexample", "format_result"]


def format_counterexample(violation: CounterExample) -> str:
    """A heading naming the violated property, its trace (if any) and the ``violated:`` line.

    A deadlock's heading says why the last state is one, and the trace ends at that state (no
    ``violated:`` line: there is no invariant, rule or value to name).
    """
    if violation.kind is ViolationKind.DEADLOCK:
        return "\n".join(
            [
                f"deadlock after {len(violation.steps) - 1} step(s): {violation.detail}",
                format_trace(violation.steps),
            ]
        )
    heading = f"{violation.kind.value} violated: {violation.name}"
    if violation.kind in {ViolationKind.WITNESS, ViolationKind.COVERAGE}:
        return f"{heading}\n    {violation.detail}"
    lines = [heading]
    if violation.detail:
        lines.append(f"    {violation.detail}")
    lines.append(
        format_trace(
            violation.steps,
            violated=violation.name,
            cites=violation.cites,
            compared=violation.compared,
        )
    )
    return "\n".join(lines)


def format_result(result: CheckResult) -> str:
    """Summary, per-action coverage, witnesses and every counterexample of ``result``."""
    verdict = "OK" if result.ok else f"FAILED ({len(result.violations)} violation(s))"
    scope = "exhaustive" if result.exhaustive else "not exhaustive"
    lines = [
        f"model {result.model}: {verdict}",
        f"  {result.mode}, {scope}, symmetry {'on' if result.symmetry else 'off'}, "
        f"{result.workers} worker(s)",
        f"  {result.distinct_states:,} distinct states, {result.transitions:,} transitions, "
        f"depth {result.depth}, {result.seconds:.2f} s ({result.states_per_second:,.0f} "
        "states/s)",
        f"  ~{result.bytes_per_state:.0f} B/state; fingerprint collision probability "
        f"{result.collision_probability:.1e} (TLC optimistic "
        f"{result.collision_probability_tlc:.1e})",
        "  coverage:",
        f"    {'action':<24} {'enabled':>10} {'fired':>10} {'new states':>10}",
    ]
    for item in result.coverage:
        note = "  (declared unreachable)" if item.declared_unreachable else ""
        lines.append(
            f"    {item.action:<24} {item.enabled:>10,} {item.fired:>10,} "
            f"{item.new_states:>10,}{note}"
        )
    if result.witnesses:
        lines.append("  witnesses:")
        for witness in result.witnesses:
            status = (
                f"satisfied after {len(witness.steps) - 1} step(s)"
                if witness.satisfied
                else "not satisfied"
            )
            lines.append(f"    {witness.name}: {status}")
    for violation in result.violations:
        lines.append("")
        lines.append(format_counterexample(violation))
    return "\n".join(lines)
