"""Fixtures of the verbs tests: a private soft fabric per test, removed afterwards."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def fabric() -> Iterator[Path]:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    path = Path(tempfile.mkdtemp(prefix="tent-sv-", dir=base))
    yield path
    shutil.rmtree(path, ignore_errors=True)
