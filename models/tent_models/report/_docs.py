"""The charts of the spec-review pages: each known-bad variant's counterexample, drawn, so a
reviewer sees at a glance what each rule prevents (``tent spec charts``).

Every known-bad variant of the catalogue (``tent_models.configs``: credit, admission, gated) is
checked as ``tent check`` checks it, and the counterexample to the invariant it must violate
is drawn as ``docs/charts/known_bad/<variant>.svg``. The folder is owned by the generator:
:func:`write` removes charts it no longer generates, and :func:`stale` (``tent spec charts
--check``, and a test) says which checked-in files differ from what the spec draws today.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tent_models import configs
from tent_models.checker import ViolationKind, check
from tent_models.configs import admission as configs_admission
from tent_models.configs import gated as configs_gated
from tent_models.report._chart import counterexample_chart
from tent_models.report._html import slug
from tent_models.report._svg import DOCS_DIFF_CHARS, svg

__all__ = ["DEFAULT_DIRECTORY", "charts", "known_bad", "stale", "write"]

DEFAULT_DIRECTORY = Path("docs") / "charts" / "known_bad"
"""Where ``tent spec charts`` writes, relative to the project root."""


def known_bad() -> list[tuple[str, Callable[[], Any], str]]:
    """``(target name, model factory, invariant it must violate)`` of every known-bad
    variant, as the catalogue names them (``tent check --only '*/bad/*'``)."""
    out: list[tuple[str, Callable[[], Any], str]] = [
        (f"credit/bad/{variant}", factory, configs.KNOWN_BAD_EXPECTED[variant])
        for variant, factory in configs.KNOWN_BAD_CONFIGS.items()
    ]
    for module in (configs_admission, configs_gated):
        out.extend((name, factory, inv) for name, (factory, inv) in module.KNOWN_BAD.items())
    return sorted(out, key=lambda item: item[0])


def _chart(name: str, factory: Callable[[], Any], invariant: str) -> str:
    result = check(factory())
    for violation in result.violations:
        if violation.name == invariant and violation.kind in (
            ViolationKind.INVARIANT,
            ViolationKind.RECOVERABILITY,
        ):
            title = f"{name}: {violation.kind.value} {invariant}"
            chart = counterexample_chart(factory(), violation, ident=slug(name), title=title)
            return svg(chart, diff_chars=DOCS_DIFF_CHARS)
    raise ValueError(f"{name} is not refuted by {invariant}: `tent check` fails it too")


def charts() -> Mapping[str, str]:
    """File name -> SVG text of every known-bad variant's chart (checks each variant)."""
    return {f"{slug(name)}.svg": _chart(name, f, inv) for name, f, inv in known_bad()}


def stale(directory: Path = DEFAULT_DIRECTORY) -> tuple[str, ...]:
    """Names of the charts in ``directory`` that are missing, different, or no longer drawn
    (empty when the checked-in charts are up to date). Reads only."""
    expected = charts()
    out = [
        name
        for name, text in expected.items()
        if not (directory / name).is_file()
        or (directory / name).read_text(encoding="utf-8") != text
    ]
    if directory.is_dir():
        out.extend(p.name for p in directory.glob("*.svg") if p.name not in expected)
    return tuple(sorted(out))


def write(directory: Path = DEFAULT_DIRECTORY) -> tuple[str, ...]:
    """Write every chart into ``directory`` (created); remove charts no longer drawn. Returns
    the names written or removed. Raises ``OSError`` when the folder cannot be written."""
    expected = charts()
    directory.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, text in expected.items():
        path = directory / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(name)
    for path in directory.glob("*.svg"):
        if path.name not in expected:
            path.unlink()
            changed.append(path.name)
    return tuple(sorted(changed))
