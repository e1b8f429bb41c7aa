"""A project's own models for ``tent check``: ``--model module:factory`` and ``[tool.tent]``.

A project lists its models in its ``pyproject.toml``::

    [tool.tent]
    manifest = "tent-manifest.json"   # optional: expected state counts (`tent manifest update`)

    [[tool.tent.models]]
    factory = "mylock.model:Lock"     # a callable returning a model (a Model subclass is one)
    bounds = { processes = 3 }        # keyword arguments for the factory
    name = "lock/3"                   # optional: the target name (default: the model's name)
    symmetry = true                   # optional: canonicalize states (default true)
    deadlock = true                   # optional: judge deadlocks (default true)

``tent check`` then checks those models instead of the shipped catalogue (``--model`` on the
command line wins over the table). The project's folder is put first on ``sys.path`` while a
factory is imported, so a module beside ``pyproject.toml`` needs no installation.

Every key is validated before anything runs: an unknown key is a :class:`ProjectError` that
suggests the closest known key ("did you mean ...?").
"""

from __future__ import annotations

import difflib
import importlib
import sys
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType
from typing import Any

import attrs

from tent_models.checker import PlainModel, check
from tent_models.manifest import Counts, Manifest
from tent_models.model_api import SpecModel
from tent_models.registry import Outcome, RunOptions, Target, TargetKind, Tier, judge_model

__all__ = [
    "MODEL_KEYS",
    "PROJECT_KEYS",
    "Project",
    "ProjectError",
    "UserModel",
    "find_pyproject",
    "load_factory",
    "load_project",
    "unknown_key_message",
    "user_targets",
]

PROJECT_KEYS = ("manifest", "models")
"""The keys ``[tool.tent]`` accepts."""

MODEL_KEYS = ("factory", "bounds", "name", "symmetry", "deadlock")
"""The keys each ``[[tool.tent.models]]`` entry accepts."""


class ProjectError(ValueError):
    """A ``--model`` spec or a ``[tool.tent]`` table is invalid; nothing was run."""


def unknown_key_message(key: str, known: Sequence[str], where: str) -> str:
    """``unknown key 'fatcory' in [tool.tent.models]; did you mean 'factory'?`` (difflib)."""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
    return f"unknown key {key!r} in {where}{hint}"


def _reject_unknown(table: Mapping[str, Any], known: Sequence[str], where: str) -> None:
    for key in table:
        if key not in known:
            raise ProjectError(unknown_key_message(key, known, where))


def _freeze(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


@attrs.frozen(kw_only=True)
class UserModel:
    """One model of a project: where its factory is, and the bounds it is built with."""

    factory: str
    bounds: Mapping[str, Any] = attrs.field(factory=dict, converter=_freeze)
    name: str | None = None
    symmetry: bool = True
    deadlock: bool = True


@attrs.frozen(kw_only=True)
class Project:
    """A project's ``[tool.tent]`` table; ``root`` is the folder of its ``pyproject.toml``."""

    root: Path
    models: tuple[UserModel, ...] = ()
    manifest: Path | None = None


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` in ``start`` or a parent folder, or ``None``."""
    for folder in (start.resolve(), *start.resolve().parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def _typed(entry: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = entry[key]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ProjectError(f"{where}: {key} must be a {kind.__name__}, got {value!r}")
    return value


def _user_model(entry: object, where: str) -> UserModel:
    if not isinstance(entry, Mapping):
        raise ProjectError(f"{where} must be a table, got {type(entry).__name__}")
    _reject_unknown(entry, MODEL_KEYS, where)
    if "factory" not in entry:
        raise ProjectError(f'{where} needs a factory = "package.module:callable"')
    factory = _typed(entry, "factory", str, where)
    _split_spec(factory)
    return UserModel(
        factory=factory,
        bounds=_typed(entry, "bounds", dict, where) if "bounds" in entry else {},
        name=_typed(entry, "name", str, where) if "name" in entry else None,
        symmetry=_typed(entry, "symmetry", bool, where) if "symmetry" in entry else True,
        deadlock=_typed(entry, "deadlock", bool, where) if "deadlock" in entry else True,
    )


def load_project(pyproject: Path) -> Project | None:
    """The ``[tool.tent]`` table of ``pyproject``, or ``None`` when it has none.

    Raises :class:`ProjectError` when the file is unreadable or not TOML, or the table has an
    unknown key, a value of the wrong type or a malformed factory spec.
    """
    try:
        document = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProjectError(f"cannot read {pyproject}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ProjectError(f"{pyproject} is not valid TOML: {exc}") from exc
    table = document.get("tool", {}).get("tent")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ProjectError(f"{pyproject}: [tool.tent] must be a table")
    _reject_unknown(table, PROJECT_KEYS, "[tool.tent]")
    entries = table.get("models", [])
    if not isinstance(entries, list):
        raise ProjectError(f"{pyproject}: tool.tent.models must be an array of tables")
    models = tuple(
        _user_model(entry, f"[[tool.tent.models]] entry {index + 1}")
        for index, entry in enumerate(entries)
    )
    manifest = None
    if "manifest" in table:
        manifest = pyproject.parent / _typed(table, "manifest", str, "[tool.tent]")
    return Project(root=pyproject.parent, models=models, manifest=manifest)


def _split_spec(spec: str) -> tuple[str, str]:
    module, sep, attr = spec.partition(":")
    if (
        not sep
        or not module
        or not attr
        or not all(part.isidentifier() for part in (*module.split("."), *attr.split(".")))
    ):
        raise ProjectError(
            f"model spec {spec!r} must look like package.module:factory (a dotted module, a "
            "colon, then the name of a callable returning a model)"
        )
    return module, attr


@contextmanager
def _importable_from(root: Path | None) -> Iterator[None]:
    if root is None or str(root) in sys.path:
        yield
        return
    sys.path.insert(0, str(root))
    try:
        yield
    finally:
        sys.path.remove(str(root))


def load_factory(spec: str, *, root: Path | None = None) -> Callable[..., Any]:
    """Import ``package.module:name`` (``root`` first on ``sys.path``) and return the callable.

    Raises :class:`ProjectError` when the spec is malformed, the module cannot be imported (the
    message names the underlying error), the name is missing or it is not callable.
    """
    module_name, attr = _split_spec(spec)
    with _importable_from(root):
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            raise ProjectError(
                f"cannot import {module_name!r} for model {spec!r}: {type(exc).__name__}: {exc}"
            ) from exc
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            known = [n for n in dir(target) if not n.startswith("_")]
            close = difflib.get_close_matches(part, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ProjectError(f"{module_name!r} has no attribute {part!r}{hint}")
        target = getattr(target, part)
    if not callable(target):
        raise ProjectError(f"{spec!r} is not callable (a factory returning a model)")
    return target  # type: ignore[no-any-return]


def build(user: UserModel, *, root: Path | None = None) -> tuple[str, Callable[[], SpecModel[Any]]]:
    """The target name and a zero-argument factory of ``user`` (the model is built once here
    to learn its name and to fail early on bad bounds). Raises :class:`ProjectError`."""
    factory = load_factory(user.factory, root=root)
    bounds = dict(user.bounds)

    def make() -> SpecModel[Any]:
        model: SpecModel[Any] = factory(**bounds)
        return model

    try:
        model = make()
    except TypeError as exc:
        raise ProjectError(f"model {user.factory!r} with bounds {bounds}: {exc}") from exc
    for method in ("initial_states", "successors", "invariants", "action_names", "pack"):
        if not callable(getattr(model, method, None)):
            raise ProjectError(
                f"{user.factory!r} returned a {type(model).__name__} without {method}(): "
                "subclass tent_models.Model (docs/own_protocol.md)"
            )
    name = user.name or str(getattr(model, "name", "") or user.factory)
    return name, make


NO_MANIFEST = (
    "counts not compared: no manifest configured (record them with `tent manifest update`)"
)


def _user_target(
    name: str, make: Callable[[], SpecModel[Any]], user: UserModel, *, compare_counts: bool
) -> Target:
    def run(options: RunOptions) -> Outcome:
        model = make()
        result = check(
            PlainModel(model) if options.plain else model,
            symmetry=user.symmetry,
            check_deadlock=user.deadlock and not options.no_deadlock,
            workers=options.workers,
            progress=options.progress,
        )
        if compare_counts:
            return judge_model(name, Tier.CI, result, options.manifest)
        # No manifest: judge everything else; the counts are compared with themselves.
        measured = Counts(
            distinct_states=result.distinct_states,
            transitions=result.transitions,
            depth=result.depth,
        )
        outcome = judge_model(name, Tier.CI, result, Manifest(models={name: measured}))
        return attrs.evolve(outcome, message=NO_MANIFEST) if outcome.passed else outcome

    return Target(
        name=name,
        kind=TargetKind.MODEL,
        tier=Tier.CI,
        description=f"exhaustive check of {user.factory}"
        + (f" with {dict(user.bounds)}" if user.bounds else ""),
        run=run,
        model=make,
    )


def user_targets(
    users: Sequence[UserModel], *, root: Path | None, compare_counts: bool
) -> tuple[Target, ...]:
    """One ``model`` target (tier ``ci``) per user model, every factory imported and built
    first. With ``compare_counts`` the run's manifest must hold each model's counts (a missing
    entry fails, as for the shipped models); without, counts are reported, not compared.

    Raises :class:`ProjectError` (a bad spec, an import failure, bad bounds, two models with
    the same name) before any model is checked.
    """
    targets = []
    for user in users:
        name, make = build(user, root=root)
        targets.append(_user_target(name, make, user, compare_counts=compare_counts))
    names = [t.name for t in targets]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ProjectError(
            f'two models are named {", ".join(duplicates)}: give each a name = "..."'
        )
    return tuple(targets)
