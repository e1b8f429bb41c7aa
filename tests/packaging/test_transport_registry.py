"""Transports are packages behind one registry: nothing outside ``devices/<transport>/`` imports a
transport, and the engine picks one by name (docs/transport.md, "Adding a transport").

Every import counts (module level, in a function, under ``TYPE_CHECKING``), as in
``test_import_cycles.py``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from tent_transport.control import PskIdentity
from tent_transport.devices import register_transport, transport_names
from tent_transport.engine import EngineOptions
from tent_transport.errors import InvalidArgument

PACKAGE = Path(__file__).resolve().parents[2] / "transport" / "tent_transport"
TRANSPORTS = ("tcp", "verbs")
"""The transport packages under ``devices/``."""


def _imports(path: Path, module: str) -> set[str]:
    """Absolute names of every module ``path`` (the module ``module``) imports."""
    here = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out.append((".".join(parts[:-1] if parts[-1] == "__init__" else parts), path))
    return out


def _transport_of(module: str) -> str | None:
    for name in TRANSPORTS:
        prefix = f"tent_transport.devices.{name}"
        if module == prefix or module.startswith(prefix + "."):
            return name
    return None


def test_only_a_transport_imports_its_own_package() -> None:
    offenders = []
    for module, path in _modules():
        home = _transport_of(module)
        for imported in _imports(path, module):
            other = _transport_of(imported)
            if other is not None and other != home:
                offenders.append(f"{module} imports {imported}")
    assert offenders == []


def test_the_checker_sees_a_transport_import(tmp_path: Path) -> None:
    # the check above must be able to fail: an engine module naming the TCP package is caught
    # in both spellings
    probe = tmp_path / "_probe.py"
    probe.write_text("from ..devices.tcp import TcpRail\nimport tent_transport.devices.verbs\n")
    found = {m for m in _imports(probe, "tent_transport.engine._probe") if _transport_of(m)}
    assert "tent_transport.devices.tcp" in found
    assert "tent_transport.devices.verbs" in found


def test_a_tcp_engine_loads_no_verbs_module() -> None:
    code = (
        "import sys\n"
        "from tent_transport.config import load_engine_config\n"
        "from tent_transport.control import PskIdentity\n"
        "from tent_transport.engine import Engine, EngineOptions\n"
        "Engine(load_engine_config({}), EngineOptions(peer_id=1, "
        "identity=PskIdentity(local_peer=1, keys={})))\n"
        "assert 'tent_transport.devices.tcp' in sys.modules\n"
        "loaded = [m for m in sys.modules if m.startswith('tent_transport.devices.verbs')]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_unknown_transport_names_are_refused_by_the_options() -> None:
    with pytest.raises(ValueError, match="unknown transport 'carrier-pigeon'"):
        EngineOptions(
            peer_id=1, identity=PskIdentity(local_peer=1, keys={}), device="carrier-pigeon"
        )


def test_a_transport_checks_the_options_it_cannot_run() -> None:
    with pytest.raises(ValueError, match="one rail"):
        EngineOptions(
            peer_id=1,
            identity=PskIdentity(local_peer=1, keys={}),
            device="softverbs",
            rail_addresses=(("127.0.0.1", 0), ("127.0.0.1", 0)),
        )


def test_built_in_names_cannot_be_taken_and_junk_is_refused() -> None:
    class _Nothing:
        pass

    with pytest.raises(InvalidArgument, match="built-in"):
        register_transport("tcp", _Nothing())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="check"):
        register_transport("junk", _Nothing())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="non-empty"):
        register_transport("", _Nothing())  # type: ignore[arg-type]
    assert "junk" not in transport_names()
    assert transport_names()[:3] == ("tcp", "softverbs", "verbs")
