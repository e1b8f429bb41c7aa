"""A seeded sample of the wire fuzz campaign (``benchmarks/fuzz_wire.py``) runs in the suite.

The full campaign (1,000,000 inputs plus coverage-guided runs) is a benchmark; this sample of
20,000 inputs takes a few seconds and fails on any undocumented exception from ``decode`` or
an endpoint, and on an accepted input that does not re-encode to the same bytes.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz_wire.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_wire", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fuzz_wire", module)
    spec.loader.exec_module(module)
    return module


fuzz_wire = _load()


def test_seeded_sample_has_only_documented_outcomes() -> None:
    report = fuzz_wire.run(20_000, seed=2519)
    assert report["failures"] == []
    assert report["inputs"] == 20_000
    # every generator ran, and the sample reached acceptance and most refusal codes
    generators = fuzz_wire.Generators(fuzz_wire.random.Random(0), fuzz_wire.golden_vectors())
    assert set(report["by_generator"]) == set(generators.table)
    decoded = report["decode"]
    assert decoded["accepted"] > 0
    for code in ("MALFORMED", "INVALID_FIELD", "NON_CANONICAL", "TOO_DEEP", "UNKNOWN_TYPE"):
        assert decoded[f"refused:{code}"] > 0, code
    assert report["endpoints"]["protocol_violation"] > 0


def test_the_campaign_catches_an_undocumented_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    # The harness must be able to fail: a decoder that leaks a ValueError is reported.
    original = fuzz_wire.decode

    def leaky(data: bytes) -> object:
        if len(data) > 40:
            raise ValueError("leaked")
        return original(data)

    monkeypatch.setattr(fuzz_wire, "decode", leaky)
    report = fuzz_wire.run(500, seed=1)
    assert report["failures"]
    assert report["failures"][0]["error"].startswith("ValueError")


@given(st.binary(max_size=256))
def test_decode_of_any_bytes_is_a_decode_error_or_an_exact_round_trip(data: bytes) -> None:
    fuzz_wire._one_input(data)
