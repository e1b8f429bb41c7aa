"""Bytes per stored state of one check, in a fresh process; prints one JSON line.

Usage::

    python benchmarks/checker_memory.py MODEL [--max-states N] [--bitstate LOG2_BITS] [--tables]

``MODEL`` is a name of ``tent_models.configs.CONFIGS`` or ``bag/ci`` (the readable model of
``tests/models/bag_credit.py``). Two figures, as ``benchmarks/checker.py`` measures them: the
checker's own estimate (seen set with its int objects, parent links, action ids, recoverability
edges; ``CheckResult.bytes_per_state``) and the growth of ``ru_maxrss`` over the run divided by
the states stored (everything: frontier states, the model's memo tables, allocator slack).
Run it once per configuration: ``ru_maxrss`` only grows within a process. ``--tables`` adds,
per memo table of the model (every ``dict`` or ``set`` attribute), its entries and the bytes of
everything it references, each object counted once (in the order listed), after the run.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path
from typing import Any

import click

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "models"))


# "\b" before a paragraph keeps it as written (click would rewrap the lists)
@click.command(
    help=(__doc__ or "").replace("\n\n", "\n\n\b\n"),
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.argument("model")
@click.option("--max-states", type=click.IntRange(min=1), default=None)
@click.option("--bitstate", type=click.IntRange(10, 40), default=None)
@click.option("--tables", is_flag=True, help="the model's memo tables after the run")
def main(model: str, max_states: int | None, bitstate: int | None, tables: bool) -> None:
    from tent_models.checker import check
    from tent_models.configs import CONFIGS

    if model == "bag/ci":
        from bag_credit import BagCredit

        spec: Any = BagCredit(max_total=2, max_in_flight=2, max_faults=1)
    else:
        spec = CONFIGS[model]()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = check(spec, max_states=max_states, bitstate=bitstate)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report: dict[str, Any] = {}
    if tables:
        report["tables"] = memo_tables(spec, result.distinct_states)
    print(
        json.dumps(
            {
                **report,
                "model": model,
                "max_states": max_states,
                "bitstate": bitstate,
                "states": result.distinct_states,
                "estimated_bytes_per_state": round(result.bytes_per_state, 1),
                "ru_maxrss_growth_bytes_per_state": round(
                    (after - before) * 1024 / result.distinct_states, 1
                ),
                "collision_probability": result.collision_probability,
            }
        )
    )


def memo_tables(model: Any, states: int) -> dict[str, dict[str, float]]:
    """Entries and referenced bytes (each object once) of the model's dict and set attributes."""
    seen: set[int] = set()
    out = {}
    for name, table in vars(model).items():
        if not isinstance(table, dict | set) or not table:
            continue
        size = 0
        stack: list[Any] = [table]
        while stack:
            item = stack.pop()
            if id(item) in seen:
                continue
            seen.add(id(item))
            size += sys.getsizeof(item)
            if isinstance(item, dict):
                stack.extend(item.keys())
                stack.extend(item.values())
            elif isinstance(item, tuple | list | set | frozenset):
                stack.extend(item)
        out[name] = {"entries": len(table), "bytes_per_state": round(size / states, 1)}
    return out


if __name__ == "__main__":
    main()
