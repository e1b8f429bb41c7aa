"""The verbs transport as the registry builds it: ``softverbs`` (the soft RC device) and
``verbs`` (pyverbs on a named device). One :class:`VerbsRail` and one :class:`VerbsReceiver`,
each with its own verbs context, so an engine can send to and receive from the same peer
without their QPs meeting; no data listener (the exchange rides the control connection)."""

from __future__ import annotations

from .._registry import TransportParts, TransportSpec
from ._backend import VerbsBackend, load_pyverbs, soft_backend
from ._rail import VerbsRail
from ._receiver import VerbsReceiver
from .device import VerbsDeviceConfig

__all__ = ["TRANSPORT", "VerbsTransport"]


class VerbsTransport:
    def check(self, *, device: str, rails: int, data_tls: bool, device_name: str) -> None:
        if rails != 1 or data_tls:
            raise ValueError("a verbs engine has one rail and no data TLS")
        if device == "verbs" and not device_name:
            raise ValueError("device 'verbs' needs verbs_device (an RDMA device name)")

    def build(self, spec: TransportSpec) -> TransportParts:
        """Raises the backend's ``PyverbsRDMAError`` (no such device) or ``ImportError`` (no
        pyverbs) for ``verbs``."""
        backend: VerbsBackend
        if spec.device == "softverbs":
            backend, name = soft_backend(), "soft0"
        else:
            backend, name = load_pyverbs(), spec.device_name
        config = VerbsDeviceConfig(device_name=name, link_speed_gbps=spec.link_speed_gbps[0])
        rail = VerbsRail(backend, config, name=f"{spec.device}0", rail=0)
        try:
            rx = VerbsReceiver(
                backend,
                config,
                name=f"{spec.device}0-rx",
                receiver=spec.plane,
                segments=spec.segments,
                credit=spec.credit,
            )
        except BaseException:
            rail.close()
            raise
        return TransportParts(rails=[rail], receivers=[rx], staged_writes=False)


TRANSPORT = VerbsTransport()
