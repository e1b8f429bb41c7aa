"""Tool-generated mutants: a seeded sample of cosmic-ray's mutations of the two cores.

cosmic-ray (``pip install cosmic-ray``, the ``mutation`` extra) enumerates every position each of
its operators can mutate, in a parso tree of the module: a module of ``tent_credit`` has a few
hundred. Its own runner would then run one whole test command per mutation; here only its
operators are used (:func:`enumerate_mutants`, :func:`mutate`), and the benchmark's runner applies
a seeded sample of them to a copy and runs only the tests that cover each mutated line.

The sample is reproducible: the enumeration is sorted (module, operator, occurrence) and
``random.Random(seed).sample`` picks ``per_package`` of each package's mutations.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Iterable, Sequence
from pathlib import Path

from ._cosmic import operators as cosmic_operators
from .model import ToolMutant

TOOL_PACKAGES = ("tent_credit", "tent_sched")
# Re-export lists only: a mutation there changes what a name resolves to, nothing the
# protocol does.
_SKIPPED_FILES = ("__init__.py",)


def module_files(root: Path, packages: Sequence[str] = TOOL_PACKAGES) -> list[str]:
    return [
        str(path.relative_to(root))
        for package in packages
        for path in sorted((root / package).glob("*.py"))
        if path.name not in _SKIPPED_FILES
    ]


def _annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where the type annotations are: with ``from __future__ import annotations`` they are
    never evaluated, so a mutation inside one (``int | None`` → ``int << None``) is equivalent
    by construction and is left out of the pool."""
    spans: list[tuple[tuple[int, int], tuple[int, int]]] = []
    for node in ast.walk(ast.parse(source)):
        notes: list[ast.expr | None] = []
        if isinstance(node, ast.arg):
            notes.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            notes.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            notes.append(node.annotation)
        for note in notes:
            if note is not None and note.end_lineno is not None and note.end_col_offset is not None:
                spans.append(
                    ((note.lineno, note.col_offset), (note.end_lineno, note.end_col_offset))
                )
    return spans


def enumerate_mutants(root: Path, files: Iterable[str]) -> list[ToolMutant]:
    """Every (operator, occurrence) cosmic-ray can apply to each file, with its line.

    Mutations inside type annotations keep their occurrence number (cosmic-ray counts them)
    but are not returned.
    """
    from cosmic_ray.ast import ast_nodes, get_ast

    operators = cosmic_operators()
    out: list[ToolMutant] = []
    for file in files:
        source = (root / file).read_text(encoding="utf-8")
        spans = _annotation_spans(source)
        nodes = list(ast_nodes(get_ast(source)))
        for name, operator in operators:
            occurrence = 0
            for node in nodes:
                for start, _end in operator.mutation_positions(node):  # type: ignore[attr-defined]
                    if not any(lo <= tuple(start) < hi for lo, hi in spans):
                        out.append(
                            ToolMutant(
                                file=file, operator=name, occurrence=occurrence, line=start[0]
                            )
                        )
                    occurrence += 1
    return out


def sample(mutants: Sequence[ToolMutant], *, seed: int, per_package: int) -> list[ToolMutant]:
    """``per_package`` mutants of each package, drawn by ``random.Random(seed)``."""
    rng = random.Random(seed)
    picked: list[ToolMutant] = []
    by_package: dict[str, list[ToolMutant]] = {}
    for m in sorted(mutants, key=lambda m: (m.file, m.operator, m.occurrence)):
        by_package.setdefault(m.file.split("/", 1)[0], []).append(m)
    for package in sorted(by_package):
        pool = by_package[package]
        picked.extend(rng.sample(pool, min(per_package, len(pool))))
    return picked
