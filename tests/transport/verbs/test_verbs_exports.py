"""The curated public face of tent_transport.devices.verbs and its soft device (pinned)."""

from __future__ import annotations

from tent_transport.devices import verbs
from tent_transport.devices.verbs import soft


def test_verbs_exports_are_pinned() -> None:
    assert sorted(verbs.__all__) == sorted([
        "ENUM_NAMES", "MAX_VERBS_MESSAGE_BYTES", "TRANSPORT", "VERBS_SCHEMA", "AckOutcome",
        "Exposures", "ProbeResult", "VerbsAck", "VerbsBackend", "VerbsDevice",
        "VerbsDeviceConfig", "VerbsEndpoint", "VerbsMessageError", "VerbsRail", "VerbsReceiver",
        "VerbsReceiverStatistics", "VerbsRegion", "VerbsTransport",
        "WriteArrival", "decode_verbs_message", "encode_verbs_message", "load_pyverbs", "probe",
        "soft_backend",
    ])
    assert all(hasattr(verbs, name) for name in verbs.__all__)


def test_soft_exports_are_pinned() -> None:
    assert sorted(soft.__all__) == sorted([
        "CQ", "GID", "MR", "PD", "QP", "SGE", "TRANSITIONS", "WC", "AHAttr", "Context",
        "DeviceAttr", "GlobalRoute", "PortAttr", "PyverbsError", "PyverbsRDMAError",
        "PyverbsUserError", "QPAttr", "QPCap", "QPInitAttr", "RecvWR", "SendWR", "SoftConfig",
        "SoftDevice", "default_fabric", "enums", "get_device_list",
    ])
    assert all(hasattr(soft, name) for name in soft.__all__)
