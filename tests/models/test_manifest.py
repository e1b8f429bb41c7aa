"""The manifest of expected state counts: the shipped one is current, and a change is caught."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner
from tent_models import manifest, registry
from tent_models.checker import check
from tent_models.cli import main
from tent_models.manifest import Counts, Manifest, ManifestError
from tent_models.model_api import SpecModel
from tent_models.registry import TargetKind, Tier, judge_model

SHIPPED = manifest.load()
CATALOGUE = registry.catalogue()
# A tiny model whose manifest says it is large takes more than a few seconds: mark it slow.
_FAST_STATES = 20_000


def _tiny_params() -> list[object]:
    params: list[object] = []
    for target in CATALOGUE:
        if target.kind is TargetKind.MODEL and target.tier is Tier.TINY:
            entry = SHIPPED.models.get(target.name)
            slow = entry is not None and entry.distinct_states > _FAST_STATES
            marks = [pytest.mark.slow] if slow else []
            params.append(pytest.param(target.name, marks=marks, id=target.name))
    return params


def model(name: str) -> SpecModel[Any]:
    (target,) = (t for t in CATALOGUE if t.name == name)
    assert target.model is not None
    return target.model()


def measured(name: str) -> Counts:
    result = check(model(name))
    assert result.exhaustive
    return Counts(
        distinct_states=result.distinct_states, transitions=result.transitions, depth=result.depth
    )


def test_every_tiny_and_ci_model_has_a_manifest_entry() -> None:
    required = {
        t.name for t in CATALOGUE if t.kind is TargetKind.MODEL and t.tier in (Tier.TINY, Tier.CI)
    }
    assert required <= set(SHIPPED.models), "run `tent manifest update`"
    known = {t.name for t in CATALOGUE if t.kind is TargetKind.MODEL}
    assert set(SHIPPED.models) <= known, "entries of removed models: run `tent manifest update`"


@pytest.mark.parametrize("name", _tiny_params())
def test_tiny_model_counts_equal_the_manifest(name: str) -> None:
    assert SHIPPED.compare(name, measured(name)) is None


def test_a_doctored_entry_fails_the_comparison() -> None:
    name = "negotiation/tiny"
    result = check(model(name))
    real = SHIPPED.models[name]
    doctored = SHIPPED.with_counts({name: attrs.evolve(real, transitions=real.transitions + 1)})

    assert judge_model(name, Tier.TINY, result, SHIPPED).passed
    outcome = judge_model(name, Tier.TINY, result, doctored)
    assert (outcome.passed, outcome.verdict) == (False, "manifest mismatch")
    assert outcome.message.startswith("state space changed: ")
    assert f"transitions {real.transitions + 1:,} → {real.transitions:,}" in outcome.message
    assert "`tent manifest update`" in outcome.message


def test_tent_check_fails_on_a_doctored_manifest_and_passes_after_update(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    real = SHIPPED.models["negotiation/ci"]
    manifest.save(
        SHIPPED.with_counts({"negotiation/ci": attrs.evolve(real, depth=real.depth + 1)}), path
    )
    runner = CliRunner()
    failed = runner.invoke(main, ["check", "--only", "negotiation/ci", "--manifest", str(path)])
    assert failed.exit_code == 1
    assert "manifest mismatch" in failed.output
    assert "state space changed" in failed.output

    before = manifest.load(path)
    updated = runner.invoke(
        main, ["manifest", "update", "--only", "negotiation/ci", "--manifest", str(path)]
    )
    assert updated.exit_code == 0, updated.output
    after = manifest.load(path)
    assert after.models["negotiation/ci"] == real
    # Entries that were not re-measured are kept as they were.
    assert {k: v for k, v in after.models.items() if k != "negotiation/ci"} == {
        k: v for k, v in before.models.items() if k != "negotiation/ci"
    }
    passed = runner.invoke(main, ["check", "--only", "negotiation/ci", "--manifest", str(path)])
    assert passed.exit_code == 0, passed.output


def test_missing_entries_fail_except_for_deep_models() -> None:
    result = check(model("negotiation/tiny"))
    assert judge_model("negotiation/tiny", Tier.TINY, result, Manifest()).verdict == (
        "manifest mismatch"
    )
    deep = judge_model("negotiation/tiny", Tier.DEEP, result, Manifest())
    assert deep.passed
    assert "optional" in deep.message


def test_manifest_update_creates_a_manifest_with_sorted_plain_json(tmp_path: Path) -> None:
    path = tmp_path / "new.json"
    result = CliRunner().invoke(
        main, ["manifest", "update", "--only", "negotiation/*", "--manifest", str(path)]
    )
    assert result.exit_code == 0, result.output
    text = path.read_text(encoding="utf-8")
    body = json.loads(text)
    assert list(body["models"]) == ["negotiation/ci", "negotiation/tiny"]
    assert body["models"]["negotiation/ci"] == {
        "depth": SHIPPED.models["negotiation/ci"].depth,
        "distinct_states": SHIPPED.models["negotiation/ci"].distinct_states,
        "transitions": SHIPPED.models["negotiation/ci"].transitions,
    }
    assert text == Manifest.from_json(text).to_json()  # the canonical form
    again = CliRunner().invoke(
        main, ["manifest", "update", "--only", "negotiation/*", "--manifest", str(path)]
    )
    assert "up to date" in again.output


def test_shipped_file_is_in_canonical_form() -> None:
    text = manifest.DEFAULT_PATH.read_text(encoding="utf-8")
    assert text == Manifest.from_json(text).to_json()


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("not json", "not valid JSON"),
        ("[]", 'exactly one key, "models"'),
        ('{"models": {}, "extra": 1}', 'exactly one key, "models"'),
        ('{"models": []}', "must be an object"),
        ('{"models": {"m": {"distinct_states": 1, "transitions": 0}}}', "must have exactly"),
        ('{"models": {"m": {"distinct_states": 1, "transitions": 0, "depth": 1.5}}}', "integer"),
        ('{"models": {"m": {"distinct_states": 0, "transitions": 0, "depth": 0}}}', "'m'"),
        ('{"models": {"m": {"distinct_states": true, "transitions": 0, "depth": 0}}}', "integer"),
    ],
)
def test_malformed_manifests_are_rejected(text: str, complaint: str) -> None:
    with pytest.raises(ManifestError, match=complaint):
        Manifest.from_json(text)


def test_unreadable_and_unwritable_paths_raise_manifest_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="cannot read"):
        manifest.load(tmp_path / "missing.json")
    with pytest.raises(ManifestError, match="cannot write"):
        manifest.save(Manifest(), tmp_path / "no" / "such" / "folder.json")
    assert not (tmp_path / "no").exists()


def test_a_failed_save_leaves_the_old_file_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "manifest.json"
    old = Manifest(models={"a/ci": Counts(distinct_states=2, transitions=1, depth=1)})
    manifest.save(old, path)
    before = path.read_bytes()

    def no_space(self: Path, target: Path) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "replace", no_space)
    with pytest.raises(ManifestError, match="No space left"):
        manifest.save(Manifest(), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]  # no temporary left


def test_with_counts_returns_a_new_value_and_leaves_the_original() -> None:
    entry = Counts(distinct_states=2, transitions=1, depth=1)
    original = Manifest(models={"a/ci": entry})
    changed = original.with_counts({"b/ci": entry, "a/ci": attrs.evolve(entry, depth=2)})
    assert original.models == {"a/ci": entry}
    assert list(changed.models) == ["a/ci", "b/ci"]
    assert changed.models["a/ci"].depth == 2


def test_a_bad_manifest_file_is_a_clean_cli_error(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    path.write_text("{", encoding="utf-8")
    result = CliRunner().invoke(
        main, ["check", "--only", "negotiation/ci", "--manifest", str(path)]
    )
    assert result.exit_code == 1
    assert "manifest is not valid JSON" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
