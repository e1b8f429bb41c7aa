"""The optional mypyc build of the credit spec (``python -m tent_models.compiled DIR``) gives
exactly the pure spec's results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tent_models.compiled import HOT_MODULES, build, main

pytestmark = pytest.mark.slow  # mypyc compiles six modules: 1-2 minutes

# Each check runs in a fresh interpreter, so the compiled package (first on PYTHONPATH) is the
# one imported. The whole result is compared, as its repr: counts, verdicts, coverage,
# witnesses and every counterexample's steps (timing and storage aside).
RUN = """
import json, sys
import attrs
import tent_spec.credit._fastpath as fastpath
from tent_models.checker import check
from tent_models.configs import CONFIGS, KNOWN_BAD_CONFIGS
runs = {
    "credit/tiny": check(CONFIGS["credit/tiny"]()),
    "credit/ci cut": check(CONFIGS["credit/ci"](), max_states=20_000),
    "credit/ci cut, 2 workers": check(CONFIGS["credit/ci"](), max_states=20_000, workers=2),
    "equal_sequence_accepted": check(KNOWN_BAD_CONFIGS["equal_sequence_accepted"]()),
}
out = {
    name: repr(
        attrs.evolve(r, seconds=0.0, states_per_second=0.0, bytes_per_state=0.0, workers=0,
                     shard_states=())
    )
    for name, r in runs.items()
}
print(json.dumps({"compiled": fastpath.__file__.endswith(".so"), "runs": out}))
"""


def _results(pythonpath: str | None) -> dict[str, object]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", RUN], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    value: dict[str, object] = json.loads(done.stdout)
    return value


def test_the_compiled_spec_gives_the_pure_results(tmp_path: Path) -> None:
    out = tmp_path / "compiled"
    built = build(out)
    # one extension per hot module, plus mypyc's shared runtime
    names = {path.name.split(".")[0] for path in built}
    assert {Path(module).stem for module in HOT_MODULES} <= names
    pure = _results(None)
    compiled = _results(str(out))
    assert (pure["compiled"], compiled["compiled"]) == (False, True)
    assert compiled["runs"] == pure["runs"]
    runs = pure["runs"]
    assert isinstance(runs, dict)
    # a counterexample is compared too (the whole result's repr: every step of every trace)
    assert "ok=False" in runs["equal_sequence_accepted"]
    assert "stale_revived_only_by_newer_update" in runs["equal_sequence_accepted"]


def test_the_build_refuses_an_existing_folder(tmp_path: Path) -> None:
    with pytest.raises(FileExistsError):
        build(tmp_path)
    assert main([str(tmp_path)]) == 1 and main([]) == 2
