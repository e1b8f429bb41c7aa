"""Fixtures of the verbs tests: a private soft fabric per test, removed afterwards.

Every test here drives the RDMA transport (soft verbs across processes, the real pyverbs API):
marked ``transport``, stage 6 of ``.ci/run`` after ``tent check`` (``-m transport``)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.transport)


@pytest.fixture
def fabric() -> Iterator[Path]:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    path = Path(tempfile.mkdtemp(prefix="tent-sv-", dir=base))
    yield path
    shutil.rmtree(path, ignore_errors=True)
