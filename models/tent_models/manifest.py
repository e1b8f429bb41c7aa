"""The manifest of expected state-space sizes: a silent change in a model's state space fails CI.

``manifest.json`` (beside this module) records, per shipped model configuration, the distinct
states, transitions and depth of its exhaustive check (symmetry reduction on, the checker's
default). ``tent check`` compares every exhaustive result with it; ``tent manifest update``
rewrites the entries it re-measured. A change in the spec, the bounds or the checker that moves
a count is then visible in review instead of passing unnoticed (docs/design.md#checker-bar: "a
manifest of expected state counts per model in CI").

The file is plain, sorted JSON so a change reads as a one-line diff::

    {
      "models": {
        "negotiation/ci": {"depth": 8, "distinct_states": 140, "transitions": 657}
      }
    }
"""

from __future__ import annotations

import json
import os
import tempfile
import types
from collections.abc import Mapping
from pathlib import Path

import attrs

__all__ = [
    "DEFAULT_PATH",
    "UPDATE_HINT",
    "Counts",
    "Manifest",
    "ManifestError",
    "load",
    "save",
]

DEFAULT_PATH = Path(__file__).with_name("manifest.json")
"""The manifest shipped with the package (what ``tent check`` compares against by default)."""

UPDATE_HINT = (
    "if (and only if) that change was intended, review it and record it with "
    "`tent manifest update`; otherwise it is a bug in the spec, the bounds or the checker"
)

_FIELDS = ("distinct_states", "transitions", "depth")


class ManifestError(ValueError):
    """The manifest file is missing, not JSON, or not shaped as documented. Nothing was loaded."""


@attrs.frozen(kw_only=True)
class Counts:
    """The size of one exhaustively checked state space."""

    distinct_states: int = attrs.field(validator=attrs.validators.ge(1))
    transitions: int = attrs.field(validator=attrs.validators.ge(0))
    depth: int = attrs.field(validator=attrs.validators.ge(0))

    def describe(self) -> str:
        """``"140 states, 657 transitions, depth 8"``."""
        return (
            f"{self.distinct_states:,} states, {self.transitions:,} transitions, depth {self.depth}"
        )


def _freeze(value: Mapping[str, Counts]) -> Mapping[str, Counts]:
    return types.MappingProxyType(dict(sorted(value.items())))


@attrs.frozen(kw_only=True)
class Manifest:
    """Expected :class:`Counts` per model name (an immutable value; updates return a copy)."""

    models: Mapping[str, Counts] = attrs.field(factory=dict, converter=_freeze)

    def compare(self, name: str, measured: Counts) -> str | None:
        """``None`` when ``measured`` equals the entry of ``name``, else the mismatch in words.

        The words say what changed (each of states, transitions and depth as ``before → after``,
        or unchanged) and that the spec's behaviour changed: a manifest update is a review
        decision, never the fix (updating it blindly would accept a bug). A model without an
        entry is a mismatch too: its size has never been reviewed.
        """
        expected = self.models.get(name)
        if expected is None:
            return (
                f"{name} has no manifest entry (measured {measured.describe()}): its state space "
                f"was never reviewed; {UPDATE_HINT}"
            )
        if expected == measured:
            return None
        changes = []
        for field, label in zip(_FIELDS, ("states", "transitions", "depth"), strict=True):
            before, after = getattr(expected, field), getattr(measured, field)
            if before == after:
                changes.append(f"{label} {before:,} (unchanged)")
            else:
                changes.append(f"{label} {before:,} → {after:,} ({after - before:+,})")
        return (
            f"state space changed: {', '.join(changes)}. The behaviour of the spec (or of its "
            f"bounds) changed: {UPDATE_HINT}"
        )

    def with_counts(self, updates: Mapping[str, Counts]) -> Manifest:
        """A copy with ``updates`` replacing (or adding) those entries; the others are kept."""
        return Manifest(models={**self.models, **updates})

    def to_json(self) -> str:
        """The file's text: sorted keys, two-space indent, a trailing newline."""
        body = {
            "models": {
                name: {field: getattr(counts, field) for field in _FIELDS}
                for name, counts in self.models.items()
            }
        }
        return json.dumps(body, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        """Parse the file's text. Raises :class:`ManifestError` on any deviation from the shape."""
        try:
            body = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ManifestError(f"manifest is not valid JSON: {exc}") from exc
        if not isinstance(body, dict) or set(body) != {"models"}:
            raise ManifestError('manifest must be an object with exactly one key, "models"')
        models = body["models"]
        if not isinstance(models, dict):
            raise ManifestError('manifest "models" must be an object')
        parsed: dict[str, Counts] = {}
        for name, entry in models.items():
            if not isinstance(entry, dict) or set(entry) != set(_FIELDS):
                raise ManifestError(f"manifest entry {name!r} must have exactly {list(_FIELDS)}")
            if any(type(entry[field]) is not int for field in _FIELDS):
                raise ManifestError(f"manifest entry {name!r}: every count must be an integer")
            try:
                parsed[name] = Counts(**{field: entry[field] for field in _FIELDS})
            except ValueError as exc:
                raise ManifestError(f"manifest entry {name!r}: {exc}") from exc
        return cls(models=parsed)


def load(path: Path = DEFAULT_PATH) -> Manifest:
    """Read the manifest at ``path``. Raises :class:`ManifestError` when it is unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"cannot read manifest {path}: {exc.strerror}") from exc
    return Manifest.from_json(text)


def save(manifest: Manifest, path: Path = DEFAULT_PATH) -> None:
    """Write ``manifest`` to ``path``: a temporary file in the same folder, then a rename.

    Raises :class:`ManifestError` when the file cannot be written; the old file is then intact
    and no temporary file is left behind.
    """
    try:
        handle, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise ManifestError(f"cannot write manifest {path}: {exc.strerror}") from exc
    tmp = Path(name)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(manifest.to_json())
        tmp.chmod(0o644)  # mkstemp creates 0600; the manifest is a plain checked-in file
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ManifestError(f"cannot write manifest {path}: {exc.strerror}") from exc
