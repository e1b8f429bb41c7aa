"""RDMA verbs: the verbs Device over the pyverbs API, the soft RC device for tests, the probe."""

from __future__ import annotations

from ._backend import ENUM_NAMES, ProbeResult, VerbsBackend, load_pyverbs, probe, soft_backend

__all__ = [
    "ENUM_NAMES",
    "ProbeResult",
    "VerbsBackend",
    "load_pyverbs",
    "probe",
    "soft_backend",
]
