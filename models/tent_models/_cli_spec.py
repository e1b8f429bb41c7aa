"""``tent spec``: the group of artefacts generated from the spec, and ``tent spec diagram``.

``tent spec diagram`` regenerates (or, with ``--check``, only checks) the state diagrams drawn
from the spec's tables (:mod:`tent_models.diagrams`) and the SVG of every other DOT file in the
docs (:mod:`tent_models.rendering`). ``tent spec charts`` lives beside the charts it draws
(:mod:`tent_models.report._command`); :mod:`tent_models.cli` adds it to this group.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.text import Text

from tent_models import diagrams, rendering
from tent_models._cli_common import make_console

__all__ = ["spec_diagram", "spec_group"]


@click.group("spec")
def spec_group() -> None:
    """Artefacts generated from the executable specification."""


@spec_group.command("diagram")
@click.option(
    "--check",
    "check_only",
    is_flag=True,
    help="Write nothing; exit 1 when the checked-in pages are stale.",
)
@click.option(
    "--docs",
    "docs",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="The docs folder whose diagrams/ to generate (default: the project root's docs/, "
    "found from the installed package or above the working folder).",
)
def spec_diagram(*, check_only: bool, docs: Path | None) -> None:
    """Generate the state diagrams (MyST pages, Graphviz DOT, SVG) from the spec's tables.

    Also renders every other ``docs/**/*.dot`` whose SVG does not show it. Rendering needs
    Graphviz's ``dot``; ``--check`` does not.
    """
    console = make_console()
    if docs is None:
        try:
            docs = diagrams.project_root() / "docs"
        except FileNotFoundError as exc:
            raise click.UsageError(str(exc)) from exc
    directory = docs / "diagrams"
    others = [p for p in rendering.stale_renderings(docs) if p.parent != directory]
    if check_only:
        stale = [*diagrams.stale(directory), *(str(p.relative_to(docs)) for p in others)]
        if stale:
            console.print(
                Text(
                    f"stale diagram page(s) in {directory}: {', '.join(stale)}; "
                    f"regenerate with `tent spec diagram --docs {docs}`",
                    style="red",
                )
            )
            sys.exit(1)
        console.print(f"{directory}: {len(diagrams.pages())} page(s) up to date")
        return
    try:
        changed = diagrams.write(directory)
        for svg in others:
            source = svg.with_suffix(".dot").read_text(encoding="utf-8")
            svg.write_text(rendering.render_svg(source), encoding="utf-8")
            changed += (str(svg.relative_to(docs)),)
    except OSError as exc:
        raise click.ClickException(f"cannot write {directory}: {exc.strerror}") from exc
    except (rendering.GraphvizMissing, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from exc
    if changed:
        console.print(f"{directory}: updated {', '.join(changed)}")
    else:
        console.print(f"{directory}: {len(diagrams.pages())} page(s) up to date")
