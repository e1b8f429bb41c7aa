"""The five import names resolve from a fresh wheel install and for mypy
(docs/design.md#packaging)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("tent_credit", "tent_sched", "tent_spec", "tent_models", "tent_transport")


def _run(*cmd: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


@pytest.mark.slow
def test_wheel_installs_all_five_import_names_in_a_fresh_venv(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    built = _run(
        sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", dist, ROOT, cwd=ROOT
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("tent_protocol-*.whl")
    env_dir = tmp_path / "venv"
    # The fresh venv borrows the runtime deps from this environment's site-packages through a
    # plain path line (no network round trip). A path added by a .pth line is not scanned for
    # further .pth files, so this environment's editable install does not leak in: the wheel,
    # installed with --no-deps, is the only thing that can provide the five names.
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    (site_dir,) = (env_dir / "lib").glob("python3*/site-packages")
    deps = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site_dir / "_borrowed_deps.pth").write_text("\n".join(deps) + "\n")
    installed = _run(python, "-m", "pip", "install", "-q", "--no-deps", wheel, cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr
    probe = (
        "import " + ", ".join(NAMES) + "; print(" + ", ".join(f"{n}.__file__" for n in NAMES) + ")"
    )
    result = _run(python, "-c", probe, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for name in NAMES:
        # resolved from the venv's site-packages, not from the source checkout
        assert f"site-packages/{name}/__init__.py" in result.stdout
    assert str(ROOT) not in result.stdout


def test_mypy_sees_all_five_import_names_from_the_installed_package(tmp_path: Path) -> None:
    # Outside the checkout, mypy can only find the packages through the installation's .pth
    # (editable) or site-packages (wheel): exactly what a user's project sees.
    snippet = tmp_path / "user_code.py"
    snippet.write_text(
        textwrap.dedent(
            """
            import tent_credit
            import tent_sched
            import tent_spec
            import tent_models
            import tent_transport

            x: int = tent_credit.U64_MAX
            """
        )
    )
    result = _run(
        sys.executable, "-m", "mypy", "--strict", "--no-incremental", snippet, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    bad = tmp_path / "bad_code.py"
    bad.write_text("import tent_credit\ny: str = tent_credit.U64_MAX\n")
    result = _run(sys.executable, "-m", "mypy", "--strict", "--no-incremental", bad, cwd=tmp_path)
    # proves mypy really type-checks against our package (not silently Any)
    assert result.returncode == 1 and "Incompatible types" in result.stdout
