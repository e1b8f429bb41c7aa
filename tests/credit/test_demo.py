"""The shipped example runs end to end and reports that capacity was never exceeded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "examples" / "credit_demo.py"


def test_credit_demo_completes_every_transfer_within_capacity() -> None:
    result = subprocess.run(
        [sys.executable, str(DEMO), "--seed", "5"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "capacity was never exceeded" in result.stdout
    assert "receiver restarts (new session)" in result.stdout
