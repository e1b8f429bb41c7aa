"""``examples/kv_transfer.py`` runs (small) and reports every block verified."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "kv_transfer.py"


def test_kv_transfer_example_verifies_every_block() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--blocks", "24", "--block-mib", "1"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verified at the receiver: 24/24" in result.stdout
    assert "every block verified" in result.stdout
