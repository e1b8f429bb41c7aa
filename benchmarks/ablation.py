"""Guard ablation over the specs (issue 10, item 16); prints one JSON document.

Usage: ``python benchmarks/ablation.py [--ladder small|deep] [--kinds rule,reduction,...]
[--only 'credit:reserve.*']``

For every conjunct of every action's guard in each spec that has a guard table
(``tent_spec.credit.GUARDS``), the spec is checked without it on the readable path, smallest
shipped model first (:func:`tent_models.ablation.ablate`), and the verdict (refuted / survived /
inconclusive), the refuting model and violation, the states explored and the time are reported,
with the survivor's written reason (``tent_models.ablation.EXPLAINED``, or its kind) and whether
``tent check``'s judgement passes.

``--ladder deep`` adds ``credit/ci`` and ``credit/deep`` cut at 300k states each: a conjunct that
survives the small models is then tried on the big ones (a cut run is inconclusive).

Specs without a guard table (admission, gated, negotiation) are listed under ``not_ablated``:
their guards are not yet written as separable conjuncts.

Baseline in the same run: the clean credit spec on the same small ladder and path, so a
conjunct's cost reads as a ratio to it.
"""

from __future__ import annotations

import fnmatch
import json
import sys
import time

import click
from tent_models import ablation
from tent_models.checker import PlainModel, check
from tent_spec.credit import GUARD_KINDS, CreditSpec


def _clean_baseline() -> dict[str, object]:
    started = time.perf_counter()
    unpruned = type("Unpruned", (CreditSpec,), {"PRUNE_CANDIDATES": False})
    states = 0
    for rung in ablation.CREDIT_LADDER:
        states += check(PlainModel(unpruned(rung.bounds, name=rung.name))).distinct_states
    return {"states": states, "seconds": round(time.perf_counter() - started, 3)}


@click.command(
    help=(__doc__ or "").splitlines()[0], context_settings={"help_option_names": ["-h", "--help"]}
)
@click.option("--ladder", type=click.Choice(("small", "deep")), default="small", show_default=True)
@click.option("--kinds", default=",".join(GUARD_KINDS), show_default=True)
@click.option("--only", default="*", show_default=True, help="glob on spec:action.guard")
def main(ladder: str, kinds: str, only: str) -> None:
    rungs = ablation.CREDIT_DEEP_LADDER if ladder == "deep" else ablation.CREDIT_LADDER
    refs = [
        r for r in ablation.credit_guards(kinds.split(",")) if fnmatch.fnmatchcase(r.name, only)
    ]
    baseline = _clean_baseline()
    started = time.perf_counter()
    results = []
    for ref in refs:  # one progress line per conjunct on stderr (the JSON comes at the end)
        results.append(ablation.ablate(ref, rungs))
        print(f"{results[-1].seconds:8.2f} s  {ref.name}: {results[-1].summary()}", file=sys.stderr)
    rows = ablation.as_json(results)
    for row, result in zip(rows, results, strict=True):
        passed, _message = ablation.judge(result)
        row["check_passes"] = passed
        row["cost_vs_clean"] = round(result.seconds / max(float(baseline["seconds"]), 1e-9), 2)  # type: ignore[arg-type]
    counts: dict[str, int] = {}
    for r in results:
        counts[r.verdict.value] = counts.get(r.verdict.value, 0) + 1
    print(
        json.dumps(
            {
                "benchmark": "guard ablation",
                "ladder": [rung.name for rung in rungs],
                "max_states": {rung.name: rung.max_states for rung in rungs},
                "baseline_clean_spec": baseline,
                "guards": len(results),
                "verdicts": counts,
                "failing_judgements": [r["guard"] for r in rows if not r["check_passes"]],
                "seconds": round(time.perf_counter() - started, 3),
                "results": rows,
                "not_ablated": {
                    "admission": "no guard table: the admission spec's guards are not yet "
                    "written as separable conjuncts",
                    "gated": "no guard table (as admission)",
                    "negotiation": "no guard table (as admission)",
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
