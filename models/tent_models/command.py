"""The ``tent`` console script: the CLI when the ``verify`` extra is installed, else a hint.

A plain ``pip install tent-protocol`` brings only the cores' dependencies, so ``tent`` may run
without click, rich, z3 or CrossHair. It then prints which of them is missing and the command
that installs them, and exits 2 (a usage error), instead of a traceback.
"""

from __future__ import annotations

import sys

__all__ = ["VERIFY_HINT", "VERIFY_MODULES", "main"]

VERIFY_MODULES = frozenset({"click", "rich", "z3", "crosshair"})
"""Top-level modules of the ``verify`` extra's distributions."""

VERIFY_HINT = "pip install 'tent-protocol[verify]'  (from a checkout: pip install -e '.[verify]')"


def main() -> None:
    """Run the ``tent`` CLI, or explain which ``verify`` dependency is missing."""
    try:
        from tent_models.cli import main as cli  # noqa: PLC0415 - the import is what is checked
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in VERIFY_MODULES:
            raise
        print(
            f"tent: the verifier dependency {missing!r} is not installed; `tent` needs the "
            f"verify extra:\n    {VERIFY_HINT}",
            file=sys.stderr,
        )
        sys.exit(2)
    cli()
