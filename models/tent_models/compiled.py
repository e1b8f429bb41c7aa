"""An optional compiled build of the credit spec's hot path, from the same source (mypyc).

``python -m tent_models.compiled DIR`` copies the ``tent_spec`` package into ``DIR`` and
compiles the credit spec's hot modules there with mypyc (``pip install
'tent-protocol[compiled]'`` and a C compiler); ``PYTHONPATH=DIR tent check ...`` then runs
them compiled, and nothing else changes: the readable source stays the only source, and the
source tree is not touched (delete ``DIR`` to go back).

What is compiled (:data:`HOT_MODULES`): the credit spec's guards and effects, invariants,
successor enumeration and memoised fast path. ``_state.py`` is left interpreted: mypyc makes
its ``attrs`` frozen class (``CreditBounds``) a native class whose typed slots then receive
the ``attrs.field()`` markers at import (``TypeError: int object expected; got
_CountingAttr``); its ``NamedTuple`` state classes gain nothing (mypyc treats them as tuples).
The copies of the compiled modules get one line per class before compiling:
``@mypyc_attr(allow_interpreted_subclasses=True)``, because the known-bad variants, the guard
ablation (``type(...)`` at run time) and tests subclass the spec, and mypyc refuses an
interpreted subclass of a compiled class otherwise. Measured speed-ups are in
docs/checker_scale.md ("A compiled spec").
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["HOT_MODULES", "build", "open_to_subclasses"]

HOT_MODULES = (
    "tent_spec/credit/_core.py",
    "tent_spec/credit/_actions.py",
    "tent_spec/credit/_table.py",
    "tent_spec/credit/_invariants.py",
    "tent_spec/credit/_model.py",
    "tent_spec/credit/_fastpath.py",
)


_CLASS = re.compile(r"^class \w+(\((?P<bases>[^)]*)\))?:", re.MULTILINE)
_OPEN = "@mypyc_attr(allow_interpreted_subclasses=True)\n"


def open_to_subclasses(source: str) -> str:
    """``source`` with every top-level class that is not a ``NamedTuple`` decorated so that
    interpreted code may subclass it once compiled (and the decorator imported)."""

    def decorate(match: re.Match[str]) -> str:
        if "NamedTuple" in (match.group("bases") or ""):
            return match.group(0)
        return _OPEN + match.group(0)

    decorated = _CLASS.sub(decorate, source)
    if decorated == source:
        return source
    future = "from __future__ import annotations\n"
    head, sep, tail = decorated.partition(future)
    if not sep:
        return "from mypy_extensions import mypyc_attr\n" + decorated
    return head + sep + "\nfrom mypy_extensions import mypyc_attr\n" + tail


def build(out: Path) -> list[Path]:
    """Copy ``tent_spec`` into ``out`` (which must not exist) and compile :data:`HOT_MODULES`
    there; return the extension modules built.

    Raises :class:`FileExistsError` when ``out`` exists, :class:`RuntimeError` (with mypyc's
    output) when mypyc is missing or the build fails; ``out`` is removed again then.
    """
    import tent_spec  # noqa: PLC0415 - the installed package is what gets copied

    source = Path(tent_spec.__file__).parent
    if out.exists():
        raise FileExistsError(f"{out} exists: build into a new folder")
    shutil.copytree(source, out / "tent_spec", ignore=shutil.ignore_patterns("__pycache__"))
    for module in HOT_MODULES:
        path = out / module
        path.write_text(open_to_subclasses(path.read_text(encoding="utf-8")), encoding="utf-8")
    env = {**os.environ, "MYPYPATH": str(out)}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mypyc", *HOT_MODULES],
            cwd=out,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            raise RuntimeError(f"mypyc failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    shutil.rmtree(out / "build", ignore_errors=True)
    return sorted(out.glob("**/*.so"))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m tent_models.compiled DIR", file=sys.stderr)
        return 2
    try:
        built = build(Path(args[0]))
    except (FileExistsError, RuntimeError) as exc:
        print(exc, file=sys.stderr)
        return 1
    for path in built:
        print(path)
    print(f"run with: PYTHONPATH={args[0]} tent check ...", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
