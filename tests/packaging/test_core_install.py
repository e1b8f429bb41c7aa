"""The cores install and import without the verifier (z3, CrossHair, click, rich).

A fresh venv gets the built wheel and only the three core distributions (attrs, cbor2,
prometheus_client), linked from this environment so no network is needed. There ``import
tent_credit`` and ``import tent_sched`` work, nothing of the verifier is importable, and the
``tent`` entry point prints what to install instead of a traceback.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from importlib import metadata
from pathlib import Path
from zipfile import ZipFile

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE_DISTRIBUTIONS = ("attrs", "cbor2", "prometheus_client")
VERIFIER_MODULES = ("z3", "crosshair", "click", "rich")


def _run(*cmd: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    built = _run(
        sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", dist, ROOT, cwd=ROOT
    )
    assert built.returncode == 0, built.stderr
    (path,) = dist.glob("tent_protocol-*.whl")
    return path


def _requirements(wheel: Path) -> list[str]:
    with ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode()
    return [
        line.split(":", 1)[1].strip()
        for line in text.splitlines()
        if line.startswith("Requires-Dist:")
    ]


def test_the_wheel_requires_only_the_cores_dependencies_unless_an_extra_is_asked(
    wheel: Path,
) -> None:
    requirements = _requirements(wheel)
    unconditional = {
        r.split(">")[0].split("=")[0].strip().replace("-", "_")
        for r in requirements
        if ";" not in r
    }
    assert unconditional == set(CORE_DISTRIBUTIONS)
    for extra in ("verify", "test"):  # the test suite needs the verifier too
        listed = [r for r in requirements if re.search(rf"extra == [\"']{extra}[\"']", r)]
        for distribution in ("z3-solver", "crosshair-tool", "click", "rich"):
            assert any(r.startswith(distribution) for r in listed), (extra, distribution)
    with ZipFile(wheel) as archive:
        points = next(n for n in archive.namelist() if n.endswith("entry_points.txt"))
        assert "tent = tent_models.command:main" in archive.read(points).decode()


def _link_core_distributions(into: Path) -> None:
    """Symlink the top-level modules and metadata of each core distribution into ``into``."""
    for name in CORE_DISTRIBUTIONS:
        dist = metadata.distribution(name)
        tops = {Path(str(f)).parts[0] for f in dist.files or () if not str(f).startswith("..")}
        for top in tops:
            source = Path(str(dist.locate_file(top)))
            if source.exists() and not (into / top).exists():
                (into / top).symlink_to(source)


def test_a_core_only_venv_imports_the_cores_without_z3(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    (site_dir,) = (env_dir / "lib").glob("python3*/site-packages")
    borrowed, installed = tmp_path / "borrowed", tmp_path / "installed"
    borrowed.mkdir()
    _link_core_distributions(borrowed)
    unpacked = _run(
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--target",
        installed,
        wheel,
        cwd=tmp_path,
    )
    assert unpacked.returncode == 0, unpacked.stderr
    (site_dir / "_paths.pth").write_text(f"{installed}\n{borrowed}\n")

    probe = (
        "import importlib.util, sys\n"
        "import tent_credit, tent_sched, tent_spec, tent_models, tent_credit.testing\n"
        f"loaded = [m for m in {VERIFIER_MODULES!r} if m in sys.modules]\n"
        f"findable = [m for m in {VERIFIER_MODULES!r} if importlib.util.find_spec(m)]\n"
        "print(tent_credit.__file__, loaded, findable)\n"
    )
    result = _run(python, "-c", probe, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    where, loaded, findable = result.stdout.split(" ", 2)
    assert where.startswith(str(installed))  # the wheel, not the checkout
    assert (loaded, findable.strip()) == ("[]", "[]")

    tent = _run(python, "-c", "from tent_models.command import main; main()", "check", cwd=tmp_path)
    assert tent.returncode == 2
    assert "pip install 'tent-protocol[verify]'" in tent.stderr
    assert "Traceback" not in tent.stderr
