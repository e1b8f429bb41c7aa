"""What more than one ``tent`` verb shares: the console they print to, and the targets they run.

``tent check`` and ``tent manifest update`` both take ``--model`` / ``--project`` and resolve them
the same way (a project's own models, else the shipped catalogue) with :func:`target_source`;
every verb prints through :func:`make_console`, which never folds target names in a CI log. Kept
apart from :mod:`tent_models.cli` so that the command modules need not import the root group
(which imports them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import click
from rich.console import Console

from tent_models import manifest as manifest_file
from tent_models import registry
from tent_models.project import ProjectError, UserModel, find_pyproject, load_project, user_targets
from tent_models.registry import Target

__all__ = ["TargetSource", "make_console", "model_options", "target_source"]

_WIDTH_WITHOUT_TERMINAL = 140  # CI logs: wide enough that target names never fold


def make_console(*, stderr: bool = False) -> Console:
    """A console for a command's output (stderr when a report owns stdout)."""
    console = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not console.is_terminal:  # a log, not a screen: never fold or elide target names
        console.width = max(console.width, _WIDTH_WITHOUT_TERMINAL)
    return console


def model_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--model`` and ``--project``, shared by ``tent check`` and ``tent manifest update``."""
    command = click.option(
        "--project",
        "project_file",
        type=click.Path(dir_okay=False, exists=True, path_type=Path),
        default=None,
        help="The pyproject.toml whose [tool.tent] table lists the models to check (default: "
        "the nearest one above the current folder).",
    )(command)
    return click.option(
        "--model",
        "model_specs",
        multiple=True,
        metavar="MODULE:FACTORY",
        help="Check this model of your own instead of the shipped ones (repeatable; "
        "docs/own_protocol.md).",
    )(command)


@attrs.frozen(kw_only=True)
class TargetSource:
    """The pool of targets a run selects from, and the manifest it compares counts with."""

    targets: tuple[Target, ...]
    manifest: Path | None
    user: bool  # a project's own models, not the shipped catalogue


def target_source(
    model_specs: Sequence[str], project_file: Path | None, manifest_path: Path | None
) -> TargetSource:
    """``--model`` specs, else the project's ``[tool.tent]`` models, else the catalogue.

    A project's models are compared with ``--manifest`` or the table's ``manifest`` (counts are
    reported, not compared, when neither is set); the catalogue with the packaged manifest.
    Raises :class:`click.UsageError` for any invalid spec or table, before anything runs.
    """
    pyproject = project_file or find_pyproject(Path.cwd())
    try:
        found = load_project(pyproject) if pyproject is not None else None
        if model_specs:
            users = tuple(UserModel(factory=spec) for spec in model_specs)
        elif found is not None and found.models:
            users = found.models
        else:
            return TargetSource(
                targets=registry.catalogue(),
                manifest=manifest_path or manifest_file.DEFAULT_PATH,
                user=False,
            )
        manifest = manifest_path or (found.manifest if found is not None else None)
        root = found.root if found is not None else Path.cwd()
        targets = user_targets(users, root=root, compare_counts=manifest is not None)
    except ProjectError as exc:
        raise click.UsageError(str(exc)) from exc
    return TargetSource(targets=targets, manifest=manifest, user=True)
