"""``tent manifest update``: re-measure the model configurations and rewrite the manifest.

The ``tent manifest`` group and its one command. The counts it records are the ones ``tent check``
compares with (:mod:`tent_models.manifest` reads and writes the file); the models come from the
same ``--model`` / ``--project`` selection (:mod:`tent_models._cli_common`).
:mod:`tent_models.cli` registers the group.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from tent_models import manifest as manifest_file
from tent_models import registry
from tent_models._cli_common import make_console, model_options, target_source
from tent_models.manifest import Counts, Manifest, ManifestError
from tent_models.registry import RunOptions, TargetKind

__all__ = ["manifest_group", "manifest_update"]


@click.group("manifest")
def manifest_group() -> None:
    """The manifest of expected state counts per model configuration."""


@manifest_group.command("update")
@click.option(
    "--only", "only", multiple=True, metavar="GLOB", help="Re-measure only matching models."
)
@click.option("--deep", is_flag=True, help="Also measure the deep models (optional entries).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--manifest",
    "manifest_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    show_default="the packaged manifest.json, or [tool.tent] manifest for a project's models",
)
@model_options
def manifest_update(
    *,
    only: tuple[str, ...],
    deep: bool,
    workers: int,
    manifest_path: Path | None,
    model_specs: tuple[str, ...],
    project_file: Path | None,
) -> None:
    """Re-measure the tiny and ci models (and deep with --deep) and rewrite the manifest.

    Entries of models not selected are kept; a full update (no --only) also drops entries of
    models no longer in the catalogue. A model whose exploration is not exhaustive (it stopped
    at a violation) is not recorded, and the command exits 1.
    """
    console = make_console()
    source = target_source(model_specs, project_file, manifest_path)
    if source.manifest is None:
        raise click.UsageError(
            'your models need a manifest file: pass --manifest FILE or set manifest = "..." '
            "in [tool.tent]"
        )
    manifest_path = source.manifest
    catalogue = source.targets
    targets = [
        t
        for t in registry.select(catalogue, only=only or ("*",), deep=deep)
        if t.kind is TargetKind.MODEL
    ]
    if not targets:
        raise click.UsageError(f"no model matches the selection {list(only)}")
    if manifest_path.exists():
        try:
            old = manifest_file.load(manifest_path)
        except ManifestError as exc:
            raise click.ClickException(str(exc)) from exc
    else:
        old = Manifest()
    table = Table(title=f"tent manifest update ({manifest_path.name})")
    for heading in ("model", "manifest", "measured", "status"):
        table.add_column(heading, no_wrap=heading != "status")
    updates: dict[str, Counts] = {}
    unrecorded = 0
    for target in targets:
        # The target's own run: a project model's symmetry and deadlock settings apply.
        result = target.run(RunOptions(workers=workers, progress=console.is_terminal)).result
        assert result is not None  # a model target always carries its check result
        previous = old.models.get(target.name)
        before = "-" if previous is None else previous.describe()
        if not result.exhaustive:
            unrecorded += 1
            table.add_row(
                target.name, before, "-", Text("not exhaustive: not recorded", style="red")
            )
            continue
        counts = Counts(
            distinct_states=result.distinct_states,
            transitions=result.transitions,
            depth=result.depth,
        )
        updates[target.name] = counts
        status = "new" if previous is None else "unchanged" if previous == counts else "changed"
        if result.violations:
            status += f" ({len(result.violations)} violation(s): see tent check)"
        table.add_row(target.name, before, counts.describe(), status)
    new = old.with_counts(updates)
    if not only:
        known = {t.name for t in catalogue if t.kind is TargetKind.MODEL}
        new = Manifest(models={k: v for k, v in new.models.items() if k in known})
    console.print(table)
    if new != old or not manifest_path.exists():
        try:
            manifest_file.save(new, manifest_path)
        except ManifestError as exc:
            raise click.ClickException(str(exc)) from exc
        console.print(f"wrote {manifest_path}")
    else:
        console.print(f"{manifest_path} is up to date")
    if unrecorded:
        sys.exit(1)
