"""Transports by name: the one place the engine learns which transports exist.

An engine names its transport in :class:`~tent_transport.engine.EngineOptions` (``device``);
the registry turns the name into a :class:`Transport` and the transport builds the engine's
rails and receiver halves (:class:`TransportParts`) from a :class:`TransportSpec`. The built-in
transports are named here by module path and imported only when an engine asks for one (so a
TCP engine never loads pyverbs, and the engine imports no transport module); anyone can add
one with :func:`register_transport` (docs/transport.md, "Adding a transport").
"""

from __future__ import annotations

import importlib
import ssl
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

from ..errors import InvalidArgument
from ._halves import DataPlane, Rail, ReceiverHalf

if TYPE_CHECKING:
    from tent_credit import CreditReceiver

    from ..segments import SegmentTable

__all__ = [
    "Transport",
    "TransportParts",
    "TransportSpec",
    "build_transport",
    "check_transport",
    "register_transport",
    "transport_names",
]


@attrs.frozen(kw_only=True)
class TransportSpec:
    """What an engine gives its transport to build its halves with."""

    device: str
    """The name the transport was picked by (one transport may serve several names)."""
    rails: int
    """How many rails the engine runs (the number of rail addresses)."""
    link_speed_gbps: tuple[float, ...]
    """One speed per rail (0.0 = unknown)."""
    device_name: str
    """The hardware device to open, for transports that open one (verbs: e.g. ``mlx5_0``)."""
    data_ssl: tuple[ssl.SSLContext | None, ssl.SSLContext | None]
    """(server, client) contexts of the data connections, or ``None`` for plaintext."""
    plane: DataPlane
    """The receiver's shared write rules every receiver half must call."""
    segments: SegmentTable
    credit: CreditReceiver | None
    slice_bytes: int
    """The dispatch slice: the most one post hands a rail for one peer."""
    send_thread: bool | None = None
    """Plaintext TCP: send payloads on a thread per connection (``EngineOptions``, item 16;
    ``None``: the transport's default)."""
    congestion_control: str | None = None
    """TCP: the data connections' congestion control (``EngineOptions``, item 18; ``None``:
    the system's)."""


@attrs.frozen
class TransportParts:
    """An engine's rails (sender halves, one per rail) and its receiver halves."""

    rails: Sequence[Rail]
    receivers: Sequence[ReceiverHalf]
    staged_writes: bool = True
    """Whether the rails can carry staged writes (a one-sided RDMA write cannot: staging needs
    receiver code between landing and the target)."""


class Transport(Protocol):
    """A transport as the registry holds it."""

    def check(self, *, device: str, rails: int, data_tls: bool, device_name: str) -> None:
        """Refuse (``ValueError``) an engine configuration this transport cannot run, before
        anything is built."""
        ...

    def build(self, spec: TransportSpec) -> TransportParts:
        """The halves; a failure leaves nothing open."""
        ...


_BUILT_IN = {
    "tcp": "tent_transport.devices.tcp:TRANSPORT",
    "softverbs": "tent_transport.devices.verbs:TRANSPORT",
    "verbs": "tent_transport.devices.verbs:TRANSPORT",
}
_registered: dict[str, Transport] = {}


def register_transport(name: str, transport: Transport) -> None:
    """Make ``transport`` available to engines as ``device=name`` (replacing a registration
    of the same name; a built-in name cannot be taken)."""
    if type(name) is not str or not name:
        raise InvalidArgument(f"a transport name is a non-empty str: {name!r}")
    if name in _BUILT_IN:
        raise InvalidArgument(f"{name!r} is a built-in transport")
    if not callable(getattr(transport, "build", None)) or not callable(
        getattr(transport, "check", None)
    ):
        raise InvalidArgument(f"a transport has check() and build(): {transport!r}")
    _registered[name] = transport


def transport_names() -> tuple[str, ...]:
    return (*_BUILT_IN, *_registered)


def _lookup(name: str) -> Transport:
    if name in _registered:
        return _registered[name]
    path = _BUILT_IN.get(name)
    if path is None:
        raise ValueError(f"unknown transport {name!r} (known: {', '.join(transport_names())})")
    module, attribute = path.split(":")
    transport: Transport = getattr(importlib.import_module(module), attribute)
    return transport


def check_transport(*, device: str, rails: int, data_tls: bool, device_name: str) -> None:
    """``ValueError`` for an unknown transport or a configuration it refuses."""
    _lookup(device).check(device=device, rails=rails, data_tls=data_tls, device_name=device_name)


def build_transport(spec: TransportSpec) -> TransportParts:
    return _lookup(spec.device).build(spec)
