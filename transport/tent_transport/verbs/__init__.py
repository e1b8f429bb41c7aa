"""RDMA verbs: the verbs Device over the pyverbs API, the soft RC device for tests, the probe.

``VerbsDevice(load_pyverbs(), config, name=...)`` runs on a NIC; ``VerbsDevice(soft_backend(),
...)`` runs the same code on the soft device (:mod:`tent_transport.verbs.soft`).
"""

from __future__ import annotations

from ._backend import ENUM_NAMES, ProbeResult, VerbsBackend, load_pyverbs, probe, soft_backend
from ._exchange import (
    MAX_VERBS_MESSAGE_BYTES,
    VERBS_SCHEMA,
    AckOutcome,
    VerbsAck,
    VerbsEndpoint,
    VerbsMessageError,
    VerbsRegion,
    decode_verbs_message,
    encode_verbs_message,
)
from ._protection import Exposures, WriteArrival
from .device import VerbsDevice, VerbsDeviceConfig

__all__ = [
    "ENUM_NAMES",
    "MAX_VERBS_MESSAGE_BYTES",
    "VERBS_SCHEMA",
    "AckOutcome",
    "Exposures",
    "ProbeResult",
    "VerbsAck",
    "VerbsBackend",
    "VerbsDevice",
    "VerbsDeviceConfig",
    "VerbsEndpoint",
    "VerbsMessageError",
    "VerbsRegion",
    "WriteArrival",
    "decode_verbs_message",
    "encode_verbs_message",
    "load_pyverbs",
    "probe",
    "soft_backend",
]
