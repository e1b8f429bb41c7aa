"""The rich tables ``tent`` prints: the results of a run and the list of targets.

The results table is laid out for the console's width (:func:`outcomes_table`): a CI log and a
100-column terminal both read it without a number cut short.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from tent_models.registry import Outcome, Target

__all__ = ["outcomes_table", "targets_table"]


def _number(value: int | float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


_MIN_TARGET_WIDTH = 16  # below this the name column would fold into an unreadable sliver
_OPTIONAL_COLUMNS = ("states/s", "transitions", "kind")  # dropped first to last when narrow


def outcomes_table(outcomes: Sequence[Outcome], *, title: str, width: int) -> Table:
    """The results table, laid out for a ``width``-column console.

    Number columns are never cut (each gets the width of its longest cell); the target name
    folds onto several lines instead. When even then the name would get fewer than
    ``_MIN_TARGET_WIDTH`` columns, the optional columns go, in ``_OPTIONAL_COLUMNS`` order.
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

    def room_for_target() -> int:
        # every column: one space of padding on each side and one border character
        return width - sum(widths[h] + 3 for h in shown) - 4

    for optional in _OPTIONAL_COLUMNS:
        if room_for_target() >= _MIN_TARGET_WIDTH:
            break
        shown.remove(optional)
    table = Table(title=title)
    table.add_column("target", overflow="fold", ratio=1)
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
