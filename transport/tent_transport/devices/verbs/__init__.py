"""The RDMA verbs transport: the verbs Device over the pyverbs API, the soft RC device for
tests, the probe, and the engine's verbs rail and receiver half (:data:`TRANSPORT`).

``VerbsDevice(load_pyverbs(), config, name=...)`` runs on a NIC; ``VerbsDevice(soft_backend(),
...)`` runs the same code on the soft device (:mod:`tent_transport.devices.verbs.soft`).
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
from ._rail import VerbsRail
from ._receiver import VerbsReceiver, VerbsReceiverStatistics
from ._transport import TRANSPORT, VerbsTransport
from .device import VerbsDevice, VerbsDeviceConfig

__all__ = [
    "ENUM_NAMES",
    "MAX_VERBS_MESSAGE_BYTES",
    "TRANSPORT",
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
    "VerbsRail",
    "VerbsReceiver",
    "VerbsReceiverStatistics",
    "VerbsRegion",
    "VerbsTransport",
    "WriteArrival",
    "decode_verbs_message",
    "encode_verbs_message",
    "load_pyverbs",
    "probe",
    "soft_backend",
]
