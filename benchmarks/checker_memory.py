"""Bytes per stored state of one check, in a fresh process; prints one JSON line.

Usage::

    python benchmarks/checker_memory.py MODEL [--max-states N] [--bitstate LOG2_BITS]

``MODEL`` is a name of ``tent_models.configs.CONFIGS`` or ``bag/ci`` (the readable model of
``tests/models/bag_credit.py``). Two figures, as ``benchmarks/checker.py`` measures them: the
checker's own estimate (seen set with its int objects, parent links, action ids, recoverability
edges; ``CheckResult.bytes_per_state``) and the growth of ``ru_maxrss`` over the run divided by
the states stored (everything: frontier states, the model's memo tables, allocator slack).
Run it once per configuration: ``ru_maxrss`` only grows within a process.
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
@click.option("--max-states", type=int, default=None)
@click.option("--bitstate", type=int, default=None)
def main(model: str, max_states: int | None, bitstate: int | None) -> None:
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
    print(
        json.dumps(
            {
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


if __name__ == "__main__":
    main()
