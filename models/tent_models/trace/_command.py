"""``tent trace``: the click group, ``tent trace validate`` and ``tent trace from-incast``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from tent_models.trace._format import TraceError, read_trace
from tent_models.trace._validate import validate_trace

# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


# The same help names as the `tent` root: click caches a command's help option on first use,
# so a group invoked on its own first must not fix it to --help only.
@click.group("trace", context_settings={"help_option_names": ["-h", "--help"]})
def trace_cli() -> None:
    """Recorded implementation traces (docs/traces.md) and ITF traces (docs/charts.md)."""


def _is_itf(path: Path) -> bool:
    """An ITF trace is a JSON object; a CBOR trace starts with its header map (never ``{``)."""
    with path.open("rb") as handle:
        head = handle.read(64).lstrip()
    return head.startswith(b"{")


def _itf_model(spec: str | None, meta: Any) -> Any:
    """The model an ITF trace is validated on: ``--model``, else the catalogue target its
    ``#meta`` names (what ``tent check --itf`` writes). Raises :class:`TraceError`."""
    from tent_models import registry  # noqa: PLC0415 - only ITF traces need the catalogue
    from tent_models.project import ProjectError, load_factory  # noqa: PLC0415

    if spec is not None:
        try:
            return load_factory(spec, root=Path.cwd())()
        except ProjectError as exc:
            raise TraceError(str(exc)) from exc
    tent = meta.get("tent") if isinstance(meta, dict) else None
    target = tent.get("target") if isinstance(tent, dict) else None
    if not isinstance(target, str):
        raise TraceError("the ITF trace names no model: pass --model MODULE:FACTORY")
    for candidate in registry.catalogue():
        if candidate.name == target and candidate.model is not None:
            return candidate.model()
    raise TraceError(f"no shipped target {target!r} with a model: pass --model MODULE:FACTORY")


@trace_cli.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--hidden-depth", default=4, show_default=True, help="Hidden spec steps per event.")
@click.option("--max-frontier", default=1000, show_default=True, help="Spec states kept per event.")
@click.option(
    "--model",
    "model_spec",
    metavar="MODULE:FACTORY",
    help="The model ITF traces are validated on (default: the target their #meta names).",
)
@click.option(
    "--html",
    "html_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write DIR/index.html: every trace as a sequence chart, the first event the spec "
    "does not allow marked (docs/charts.md).",
)
def validate_command(
    files: tuple[str, ...],
    hidden_depth: int,
    max_frontier: int,
    model_spec: str | None,
    html_dir: Path | None,
) -> None:
    """Replay each trace FILE against the spec; exit 1 if any is rejected or unreadable.

    A CBOR FILE (docs/traces.md) is replayed against the credit spec; an ITF FILE (JSON,
    docs/charts.md) against --model or the shipped target it names. A file that cannot be read
    or decoded is named with the reason and the others are still validated: the exit status
    reports every file, not the first bad one.
    """
    from tent_models import report  # noqa: PLC0415 - keeps `tent --help` light

    failed = 0
    sections = []
    for path in files:
        try:
            if _is_itf(Path(path)):
                trace = report.read_itf(Path(path))
                model = _itf_model(model_spec, trace.meta)
                itf = report.validate_itf(trace, model, path=path, max_frontier=max_frontier)
                ok, text = itf.ok, itf.format()
                sections.append(report.itf_section(path, trace, model, itf))
            else:
                recorded = read_trace(Path(path))
                verdict = validate_trace(
                    recorded, path=path, hidden_depth=hidden_depth, max_frontier=max_frontier
                )
                ok, text = verdict.ok, verdict.format()
                sections.append(report.recorded_section(path, recorded, verdict))
        except OSError as error:
            failed += 1
            click.echo(f"{path}: UNREADABLE: {error.strerror or error}")
            sections.append(report.unreadable_section(path, str(error.strerror or error)))
            continue
        except (TraceError, report.ItfError) as error:
            failed += 1
            click.echo(f"{path}: UNREADABLE: {error}")
            sections.append(report.unreadable_section(path, str(error)))
            continue
        failed += not ok
        click.echo(text)
    if html_dir is not None:
        try:
            written = report.write_html(html_dir, report.trace_page(sections))
        except OSError as exc:
            raise click.ClickException(f"cannot write {html_dir}: {exc}") from exc
        click.echo(f"wrote {written}")
    if failed:
        click.echo(f"{failed} of {len(files)} trace(s) unreadable or rejected", err=True)
        sys.exit(1)


@trace_cli.command("from-incast")
@click.argument("folder", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
def from_incast_command(folder: Path, out: Path) -> None:
    """Convert the incast runner's TENT_INCAST_TRACE FOLDER into traces in OUT (one per
    process and run) for `tent trace validate` (docs/charts.md)."""
    from tent_models.trace._incast import convert_incast  # noqa: PLC0415

    try:
        written = convert_incast(folder, out)
    except TraceError as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:
        raise click.ClickException(f"cannot convert {folder}: {exc}") from exc
    for path in written:
        click.echo(f"wrote {path}")
