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


# Run the example with these modules unimportable, as in a venv without the transport extra.
_WITHOUT = """
import sys, runpy
class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Missing())
sys.argv = [{example!r}]
runpy.run_path({example!r}, run_name="__main__")
"""


def test_without_the_transport_extra_the_example_names_it() -> None:
    for blocked in ({"click"}, {"crc32c"}):
        code = _WITHOUT.format(blocked=blocked, example=str(EXAMPLE))
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 2, result.stderr
        assert "needs the transport extra" in result.stderr
        assert "pip install -e '.[transport]'" in result.stderr
        assert "Traceback" not in result.stderr


def test_tent_bench_transport_prints_the_figures_as_json() -> None:
    import json

    command = "import sys; from tent_models.cli import main; sys.exit(main())"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            command,
            "bench",
            "transport",
            "--blocks",
            "4",
            "--small",
            "10",
            "--no-tls",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["bare"]["throughput_mib_s"] > 0 and figures["engine"]["throughput_mib_s"] > 0
    assert (
        figures["ratio"]
        == figures["engine"]["throughput_mib_s"] / figures["bare"]["throughput_mib_s"]
    )
    assert figures["engine"]["control_messages_per_transfer"] > 0  # credit really cycled
