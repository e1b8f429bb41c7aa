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

import argparse
import json
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "models"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model")
    parser.add_argument("--max-states", type=int, default=None)
    parser.add_argument("--bitstate", type=int, default=None)
    options = parser.parse_args()
    from tent_models.checker import check
    from tent_models.configs import CONFIGS

    if options.model == "bag/ci":
        from bag_credit import BagCredit

        model = BagCredit(max_total=2, max_in_flight=2, max_faults=1)
    else:
        model = CONFIGS[options.model]()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = check(model, max_states=options.max_states, bitstate=options.bitstate)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "model": options.model,
                "max_states": options.max_states,
                "bitstate": options.bitstate,
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
