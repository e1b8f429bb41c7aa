"""The CLI side of the charts: ``tent check --html/--itf`` output and ``tent spec charts``
(the ``tent`` root in :mod:`tent_models.cli` hooks them in)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from tent_models import diagrams
from tent_models._targets import Outcome
from tent_models.report._check import check_page, write_itf_traces
from tent_models.report._html import write as write_html

__all__ = ["check_folder", "spec_charts", "write_artefacts"]


def check_folder(option: str, folder: Path | None) -> None:
    """Fail fast (a usage error) when ``folder`` could not be created or written after a run:
    it is a file, or its nearest existing ancestor is not a writable folder. Creates nothing."""
    if folder is None:
        return
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    problem = None
    if not existing.is_dir():
        problem = f"{existing} is not a folder"
    elif not os.access(existing, os.W_OK | os.X_OK):
        problem = f"the folder {existing} is not writable"
    if problem is not None:
        raise click.BadParameter(f"cannot write into {folder}: {problem}", param_hint=option)


def write_artefacts(
    console: Console,
    outcomes: Sequence[Outcome],
    seconds: float,
    *,
    title: str,
    html_dir: Path | None,
    itf_dir: Path | None,
) -> None:
    """The ``--html`` page and the ``--itf`` traces of a run (docs/charts.md). Raises
    :class:`click.ClickException` when they cannot be written."""
    try:
        if html_dir is not None:
            path = write_html(html_dir, check_page(outcomes, seconds, title=title))
            console.print(f"wrote {path}")
        if itf_dir is not None:
            written = write_itf_traces(itf_dir, outcomes)
            console.print(f"wrote {len(written)} ITF trace(s) into {itf_dir}")
    except OSError as exc:
        raise click.ClickException(f"cannot write: {exc}") from exc


@click.command("charts")
@click.option(
    "--check",
    "check_only",
    is_flag=True,
    help="Write nothing; exit 1 when the checked-in charts are stale.",
)
@click.option(
    "--docs",
    "docs",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="The docs folder whose charts/known_bad/ to generate (default: the project root's docs/).",
)
def spec_charts(*, check_only: bool, docs: Path | None) -> None:
    """Draw each known-bad variant's counterexample as a sequence chart (SVG) for the
    spec-review pages (docs/charts.md); checks every known-bad variant."""
    from tent_models.report import _docs as charts  # noqa: PLC0415 - runs the checker

    console = Console(highlight=False, soft_wrap=True)
    if docs is None:
        try:
            docs = diagrams.project_root() / "docs"
        except FileNotFoundError as exc:
            raise click.UsageError(str(exc)) from exc
    directory = docs / "charts" / "known_bad"
    if check_only:
        stale = charts.stale(directory)
        if stale:
            console.print(
                Text(
                    f"stale chart(s) in {directory}: {', '.join(stale)}; "
                    f"regenerate with `tent spec charts --docs {docs}`",
                    style="red",
                )
            )
            sys.exit(1)
        console.print(f"{directory}: {len(charts.known_bad())} chart(s) up to date")
        return
    try:
        changed = charts.write(directory)
    except OSError as exc:
        raise click.ClickException(f"cannot write {directory}: {exc.strerror}") from exc
    if changed:
        console.print(f"{directory}: updated {', '.join(changed)}")
    else:
        console.print(f"{directory}: {len(charts.known_bad())} chart(s) up to date")
