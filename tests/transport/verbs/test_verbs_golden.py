"""The verbs messages' golden vectors: fresh, byte-exact, and conforming to spec/verbs.cddl."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import verbs_endpoints, verbs_regions
from tent_transport.devices.verbs import (
    AckOutcome,
    VerbsAck,
    VerbsEndpoint,
    VerbsMessageError,
    VerbsRegion,
    decode_verbs_message,
    encode_verbs_message,
)

ROOT = Path(__file__).resolve().parents[3]


def _module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


cddl = _module(ROOT / "tests" / "credit" / "cddl_subset.py", "cddl_subset_for_verbs")
regen = _module(ROOT / "tests" / "golden" / "regen_verbs.py", "regen_verbs")
SCHEMA = cddl.Schema.from_file(ROOT / "spec" / "verbs.cddl")
VECTORS = json.loads((ROOT / "tests" / "golden" / "verbs_vectors.json").read_text())


def test_checked_in_vectors_are_fresh() -> None:
    assert regen.main(["--check"]) == 0


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector_decodes_re_encodes_and_conforms(vector: dict[str, str]) -> None:
    raw = bytes.fromhex(vector["cbor_hex"])
    message = decode_verbs_message(raw)
    assert encode_verbs_message(message) == raw
    rule = {VerbsEndpoint: "verbs-endpoint", VerbsRegion: "verbs-region", VerbsAck: "verbs-ack"}[
        type(message)
    ]
    assert SCHEMA.matches(rule, cddl.load_cbor(raw))
    assert SCHEMA.matches("verbs-message", cddl.load_cbor(raw))


@given(verbs_endpoints())
def test_every_endpoint_conforms(endpoint: VerbsEndpoint) -> None:
    assert SCHEMA.matches("verbs-endpoint", cddl.load_cbor(encode_verbs_message(endpoint)))


@given(verbs_regions())
def test_every_region_conforms(region: VerbsRegion) -> None:
    assert SCHEMA.matches("verbs-region", cddl.load_cbor(encode_verbs_message(region)))


@given(
    st.builds(
        lambda session, through, outcome: VerbsAck(
            session=session,
            through=max(through, 1) if outcome else through,
            outcome=AckOutcome(outcome),
        ),
        st.integers(0, (1 << 128) - 1),
        st.integers(0, (1 << 64) - 1),
        st.sampled_from([0, 1, 2]),
    )
)
def test_every_ack_conforms_and_round_trips(ack: VerbsAck) -> None:
    raw = encode_verbs_message(ack)
    assert decode_verbs_message(raw) == ack
    assert SCHEMA.matches("verbs-ack", cddl.load_cbor(raw))


def test_schema_one_messages_keep_their_schema() -> None:
    """An old peer's (schema 1) endpoint and region decode and re-encode byte for byte; an
    acknowledgement exists only in schema 2."""
    import cbor2

    old = {v["name"]: bytes.fromhex(v["cbor_hex"]) for v in VECTORS}
    for name in ("endpoint_roce", "region_kv_block_write"):
        message = decode_verbs_message(old[name])
        assert message.schema == 1 and encode_verbs_message(message) == old[name]
        assert decode_verbs_message(old[f"{name}_v2"]).schema == 2
    with pytest.raises(VerbsMessageError, match="schema"):
        decode_verbs_message(cbor2.dumps([0x5603, 1, 1, 1, 0]))
    with pytest.raises(VerbsMessageError, match="schema"):
        decode_verbs_message(cbor2.dumps([0x5601, 3, 1, 0, b"\0" * 16, 0, 1, 3]))


@pytest.mark.parametrize(
    "fields",
    [
        [0x5603, 2, 1, 0, 1],  # an outcome without a write
        [0x5603, 2, 1, 1, 3],  # an unknown outcome
        [0x5603, 2, 1, 1],  # a field short
        [0x5603, 2, -1, 1, 0],  # a negative session
        [0x5603, 2, 1, True, 0],  # a bool is not an int
    ],
)
def test_a_malformed_ack_is_a_typed_refusal(fields: list[object]) -> None:
    import cbor2

    with pytest.raises(VerbsMessageError):
        decode_verbs_message(cbor2.dumps(fields))


def test_the_schema_refuses_what_the_decoder_refuses() -> None:
    import cbor2

    for bad in (
        [0x5601, 1, 0, 0, b"\0" * 16, 0, 1, 3],  # QP number 0
        [0x5601, 1, 1, 0, b"\0" * 15, 0, 1, 3],  # short GID
        [0x5602, 1, 1, 2, 3, 4, 5, 6, 2],  # READ without WRITE
        [0x5602, 1, 1, 2, 3, 0, 5, 6, 1],  # empty region
        [0x5603, 1, 1, 1, 0],  # an ack in schema 1
        [0x5603, 2, 1, 1, 3],  # an unknown outcome
    ):
        assert not SCHEMA.matches("verbs-message", cddl.load_cbor(cbor2.dumps(bad)))
