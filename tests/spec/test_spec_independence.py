"""The executable spec shares no code with the implementation (docs/design.md#principle-2)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import tent_spec

SPEC_DIR = Path(tent_spec.__file__).parent
FORBIDDEN = ("tent_credit", "tent_sched", "tent_transport", "tent_models")
ALLOWED_THIRD_PARTY = {"attrs"}


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """Absolute module names imported by a file (relative imports resolve inside tent_spec)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                found.append((node.lineno, f"tent_spec.{node.module or ''}".rstrip(".")))
            else:
                found.append((node.lineno, node.module or ""))
    return found


SPEC_FILES = sorted(SPEC_DIR.rglob("*.py"))


def test_spec_package_has_modules_to_scan() -> None:
    names = {p.relative_to(SPEC_DIR).as_posix() for p in SPEC_FILES}
    assert {"credit/__init__.py", "credit/_fastpath.py", "negotiation.py", "variants.py"} <= names


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.relative_to(SPEC_DIR).as_posix())
def test_spec_module_imports_nothing_from_the_implementation(path: Path) -> None:
    for line, module in _imported_modules(path):
        top = module.split(".")[0]
        assert top not in FORBIDDEN, f"{path.name}:{line} imports {module}"
        assert top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY or top == "tent_spec", (
            f"{path.name}:{line} imports {module}: the spec may use the standard library, attrs "
            "and itself only"
        )


def test_import_scanner_sees_both_import_forms(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import tent_credit.ledger\nfrom tent_models import checker\nfrom . import x\n"
    )
    assert [m for _, m in _imported_modules(sample)] == [
        "tent_credit.ledger",
        "tent_models",
        "tent_spec",
    ]
