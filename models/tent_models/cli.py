"""The ``tent`` command: model checks, known-bad refutations and z3 proofs for CI and for people.

Verbs:

* ``tent check``: runs the catalogue's ``ci`` targets (:mod:`tent_models.registry`; ``--deep``
  adds the deep models, ``--only GLOB`` picks targets by name), prints a table and the
  counterexample of every failure, writes ``--json`` / ``--junit`` reports, and exits 1 when any
  target failed. ``--simulate`` instead walks the deep models at random from a seed.
* ``tent manifest update``: re-measures the model configurations and rewrites the manifest of
  expected state counts (:mod:`tent_models.manifest`).
* ``tent spec diagram``: regenerates the state diagrams from the spec's tables
  (:mod:`tent_models.diagrams`); ``--check`` exits 1 when the checked-in pages are stale.
* ``tent spec charts``: draws each known-bad variant's counterexample for the spec-review
  pages (:mod:`tent_models.report._docs`); ``--check`` exits 1 when they are stale.

Exit codes: 0 success, 1 a failed target / stale artefact, 2 a usage error (click's).

Each verb's command lives in a sibling module by responsibility (``_cli_check``,
``_cli_manifest``, ``_cli_spec``, with what they share in ``_cli_common``; ``tent trace`` in
:mod:`tent_models.trace`), defined apart from the root group; this module only builds the group
and registers them, so no command module imports it.
"""

from __future__ import annotations

import importlib

import click

# `Progress` and `_run_all` are re-exported: tests/models/test_cli.py drives the run loop and
# patches its progress display through this module.
from rich.progress import Progress  # noqa: F401

from tent_models._cli_check import _run_all, check_command  # noqa: F401
from tent_models._cli_manifest import manifest_group
from tent_models._cli_spec import spec_group
from tent_models.report import _command as report_command

__all__ = ["main"]


class _LazyGroup(click.Group):
    """The root group. ``tent sim`` and ``tent bench`` are defined in ``tent_transport`` and
    imported only when invoked or listed (docs/transport_design.md#verbs-placement): the checker
    never imports the I/O layer at module level. A lazy name whose module or attribute is not
    there (the transport not installed, or a group not built yet) is simply absent."""

    _LAZY: dict[str, tuple[str, str]] = {  # noqa: RUF012 (a class constant)
        "sim": ("tent_transport.cli", "sim"),
        "bench": ("tent_transport.cli", "bench"),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in self._LAZY:
            return command
        module_name, attribute = self._LAZY[cmd_name]
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return None
        found = getattr(module, attribute, None)
        return found if isinstance(found, click.Command) else None


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tent-protocol", prog_name="tent")
def main() -> None:
    """TENT protocol verification: model checks, z3 proofs and generated spec artefacts."""


main.add_command(check_command)
main.add_command(manifest_group)
main.add_command(spec_group)


def _register_trace_commands() -> None:
    # `tent trace validate FILE...` lives beside the trace format it reads, `tent spec charts`
    # beside the charts it draws.
    from tent_models.trace import trace_cli  # noqa: PLC0415 - keeps `tent --help` light

    main.add_command(trace_cli)
    spec_group.add_command(report_command.spec_charts)


_register_trace_commands()
