"""Every test in this folder moves real bytes over sockets: marked ``transport`` (stage 6 of
``.ci/run``, after ``tent check``; select with ``-m transport``)."""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.transport)
