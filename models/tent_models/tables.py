"""The rich tables ``tent`` prints: the results of a run and the list of targets.

The results table is laid out for the console's width (:func:`outcomes_table`): a CI log and a
100-column terminal both read it without a number cut short.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from tent_models.registry import Outcome, Target

__all__ = ["check_summary", "outcomes_table", "targets_table"]


def _number(value: int | float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


# Dropped first to last until the longest target name fits on one line; ``result`` always stays.
_OPTIONAL_COLUMNS = ("states/s", "transitions", "kind", "depth", "seconds", "states")


def outcomes_table(outcomes: Sequence[Outcome], *, title: str, width: int) -> Table:
    """The results table, laid out for a ``width``-column console.

    1. A target name is never split: its column is as wide as the longest name, so any name
       can be copied into ``--only``.
    2. No cell is cut: every other column gets the width of its longest cell.
    3. When the name would not fit, the optional columns go, in ``_OPTIONAL_COLUMNS`` order
       (at 100 columns the rates and transitions, at 80 every number: the per-target lines above
       the table and ``--json`` keep them); then the borders.
    """
    cells: dict[str, list[str | Text]] = {
        "kind": [o.kind.value for o in outcomes],
        "states": [_number(o.states, ",") for o in outcomes],
        "transitions": [_number(o.transitions, ",") for o in outcomes],
        "depth": [_number(o.depth, "d") for o in outcomes],
        "seconds": [f"{o.seconds:.2f}" for o in outcomes],
        "states/s": [_number(o.states_per_second, ",.0f") for o in outcomes],
        "result": [Text(o.verdict, style="green" if o.passed else "bold red") for o in outcomes],
    }
    widths = {
        heading: max([len(heading), *(len(str(cell)) for cell in column)])
        for heading, column in cells.items()
    }
    shown = list(cells)
    name_width = max(len("target"), *(len(o.target) for o in outcomes))

    def room_for_target(border: int) -> int:
        # every column: one space of padding on each side and ``border`` border characters
        return width - sum(widths[h] + 2 + border for h in shown) - 2 - 2 * border

    for optional in _OPTIONAL_COLUMNS:
        if room_for_target(1) >= name_width:
            break
        shown.remove(optional)
    boxed = room_for_target(1) >= name_width
    table = Table(title=title) if boxed else Table(title=title, box=None)
    table.add_column("target", no_wrap=True, min_width=name_width)
    for heading in shown:
        numeric = heading not in ("kind", "result")
        table.add_column(
            heading,
            justify="right" if numeric else "left",
            no_wrap=True,
            min_width=widths[heading],
        )
    for index, outcome in enumerate(outcomes):
        table.add_row(outcome.target, *(cells[heading][index] for heading in shown))
    return table


def targets_table(targets: Sequence[Target]) -> Table:
    table = Table(title=f"{len(targets)} target(s)")
    table.add_column("target", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("tier", no_wrap=True)
    table.add_column("what it checks")
    for t in targets:
        table.add_row(t.name, t.kind.value, t.tier.value, t.description)
    return table


def check_summary(outcome: Outcome) -> str:
    """One line of what a model check covered: actions fired, witnesses met; ``""`` for a
    target that checked no model. A passing model's table row alone would not show that the
    model did anything at all (a vacuous model passes every invariant)."""
    result = outcome.result
    if result is None:
        return ""
    live = [c for c in result.coverage if not c.declared_unreachable]
    fired = sum(c.fired > 0 for c in live)
    parts = [f"{fired}/{len(live)} actions fired"]
    if result.witnesses:
        met = sum(w.satisfied for w in result.witnesses)
        parts.append(f"{met}/{len(result.witnesses)} witnesses met")
    return ", ".join(parts)
