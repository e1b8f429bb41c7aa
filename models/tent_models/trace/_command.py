"""``tent trace``: the click group and ``tent trace validate``."""

from __future__ import annotations

import sys
from pathlib import Path

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
    """Recorded implementation traces (docs/traces.md)."""


@trace_cli.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--hidden-depth", default=4, show_default=True, help="Hidden spec steps per event.")
@click.option("--max-frontier", default=1000, show_default=True, help="Spec states kept per event.")
def validate_command(files: tuple[str, ...], hidden_depth: int, max_frontier: int) -> None:
    """Replay each trace FILE against the credit spec; exit 1 if any is rejected or unreadable.

    A file that cannot be read or decoded is named with the reason and the others are still
    validated: the exit status reports every file, not the first bad one.
    """
    failed = 0
    for path in files:
        try:
            trace = read_trace(Path(path))
        except OSError as error:
            failed += 1
            click.echo(f"{path}: UNREADABLE: {error.strerror or error}")
            continue
        except TraceError as error:
            failed += 1
            click.echo(f"{path}: UNREADABLE: {error}")
            continue
        report = validate_trace(
            trace, path=path, hidden_depth=hidden_depth, max_frontier=max_frontier
        )
        failed += not report.ok
        click.echo(report.format())
    if failed:
        click.echo(f"{failed} of {len(files)} trace(s) unreadable or rejected", err=True)
        sys.exit(1)
