"""Workloads for the deadline simulator: flows of requests, deterministic for a seed.

A :class:`Workload` is NICs (:class:`~tent_transport.sim.LinkSpec`), engine-configuration
overrides (the seed's JSON) and flows. A :class:`FlowSpec` is ``streams`` independent streams
of ``requests`` requests each, with sizes and deadline windows drawn uniformly from inclusive
ranges, a QoS tier, an eligibility flag, and an arrival process:

* ``poisson``: exponential inter-arrival times of mean ``interval_ns``;
* ``periodic``: one request every ``interval_ns``;
* ``burst``: every request of the stream at ``start_ns``;
* ``closed``: a thread: the next request ``interval_ns`` (think time) after the previous one
  ended (RFC #2792's "threads").

Every stream draws from its own ``random.Random`` seeded by ``(seed, flow, stream)``, so a
workload and a seed give the same requests whatever else runs. ``load_workload`` reads the
same structure from JSON (see ``docs/choosing_theta.md`` for an example file).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from ..errors import ConfigError, InvalidArgument
from ._device import LinkSpec

__all__ = ["ARRIVALS", "MIXED", "Arrival", "FlowSpec", "Workload", "load_workload", "open_arrivals"]

ARRIVALS = ("poisson", "periodic", "burst", "closed")
MIXED = ("none", "same_submit", "separate_submit")


def _count(minimum: int) -> Callable[[object, attrs.Attribute[int], int], None]:
    def check(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
        if type(value) is not int or value < minimum:
            raise InvalidArgument(f"{attr.name} must be an int >= {minimum}, got {value!r}")

    return check


def _span(minimum: int) -> Callable[[object, attrs.Attribute[tuple[int, int]], object], None]:
    def check(_inst: object, attr: attrs.Attribute[tuple[int, int]], value: object) -> None:
        if (
            type(value) is not tuple
            or len(value) != 2
            or any(type(v) is not int for v in value)
            or not minimum <= value[0] <= value[1]
        ):
            raise InvalidArgument(f"{attr.name} must be (lo, hi) ints, {minimum} <= lo <= hi")

    return check


def _to_span(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    if isinstance(value, list):
        return tuple(value)
    return value


@attrs.frozen(kw_only=True)
class FlowSpec:
    """One class of requests (see the module docstring). ``window_ns`` ``(0, 0)`` = no deadline.

    ``eligible`` False submits the requests as staging-internal work (never drop-eligible, its
    bytes never counted ahead). ``mixed`` adds a staged companion owner of ``mixed_bytes`` to
    every request: ``"same_submit"`` in the request's own submit (the seed's rule then sends
    the whole submit past the queue), ``"separate_submit"`` as a submit of its own at the same
    instant (only the companion bypasses); ``"none"`` (default) adds nothing.
    Raises InvalidArgument for an invalid field.
    """

    name: str = attrs.field()
    streams: int = attrs.field(default=1, validator=_count(1))
    requests: int = attrs.field(default=1, validator=_count(1))
    size_bytes: tuple[int, int] = attrs.field(converter=_to_span, validator=_span(1))
    window_ns: tuple[int, int] = attrs.field(default=(0, 0), converter=_to_span, validator=_span(0))
    arrival: str = attrs.field(default="poisson")
    interval_ns: int = attrs.field(default=0, validator=_count(0))
    start_ns: int = attrs.field(default=0, validator=_count(0))
    priority: int = attrs.field(default=0, validator=_count(0))
    eligible: bool = attrs.field(default=True)
    mixed: str = attrs.field(default="none")
    mixed_bytes: int = attrs.field(default=1 << 20, validator=_count(1))
    peer: int = attrs.field(default=1, validator=_count(0))

    def __attrs_post_init__(self) -> None:
        if type(self.name) is not str or not self.name:
            raise InvalidArgument(f"flow name must be a non-empty str, got {self.name!r}")
        if self.arrival not in ARRIVALS:
            raise InvalidArgument(f"flow {self.name}: arrival must be one of {ARRIVALS}")
        if self.arrival in ("poisson", "periodic") and self.interval_ns == 0:
            raise InvalidArgument(f"flow {self.name}: {self.arrival} needs interval_ns > 0")
        if type(self.eligible) is not bool:
            raise InvalidArgument(f"flow {self.name}: eligible must be a bool")
        if self.mixed not in MIXED:
            raise InvalidArgument(f"flow {self.name}: mixed must be one of {MIXED}")


@attrs.frozen(kw_only=True)
class Workload:
    """NICs, engine-configuration overrides and flows; ``horizon_ns`` stops new arrivals,
    ``measure_ns`` is the window throughput is measured over (default ``(0, horizon_ns)``).
    ``batch_same_time``: open-loop arrivals at the same instant go in one submit (a caller's
    batch), so the queue sees them together, as in the seed's worked example."""

    name: str
    description: str = ""
    seed: int = attrs.field(default=1, validator=_count(0))
    nics: tuple[LinkSpec, ...] = attrs.field()
    config: Mapping[str, Any] = attrs.field(factory=dict)
    flows: tuple[FlowSpec, ...] = attrs.field()
    horizon_ns: int = attrs.field(validator=_count(1))
    drain_ns: int = attrs.field(default=1_000_000_000, validator=_count(0))
    measure_ns: tuple[int, int] | None = attrs.field(default=None)
    batch_same_time: bool = attrs.field(default=False)

    def __attrs_post_init__(self) -> None:
        if not self.nics or not all(isinstance(n, LinkSpec) for n in self.nics):
            raise InvalidArgument("a workload needs at least one LinkSpec")
        if not self.flows or not all(isinstance(f, FlowSpec) for f in self.flows):
            raise InvalidArgument("a workload needs at least one FlowSpec")
        if len({f.name for f in self.flows}) != len(self.flows):
            raise InvalidArgument("flow names must be unique")
        if self.measure_ns is not None:
            low, high = self.measure_ns
            if not 0 <= low < high:
                raise InvalidArgument("measure_ns must be (from, to) with from < to")

    @property
    def measure_window(self) -> tuple[int, int]:
        return self.measure_ns if self.measure_ns is not None else (0, self.horizon_ns)


@attrs.frozen(kw_only=True)
class Arrival:
    """One request to submit: which flow, stream and sequence number, when, how big, until."""

    t_ns: int
    flow: int
    stream: int
    seq: int
    size: int
    window_ns: int


def stream_rng(workload: Workload, flow: int, stream: int) -> random.Random:
    """The deterministic generator of one stream."""
    return random.Random(f"{workload.seed}:{workload.flows[flow].name}:{stream}")


def draw(rng: random.Random, span: tuple[int, int]) -> int:
    low, high = span
    return low if low == high else rng.randint(low, high)


def open_arrivals(workload: Workload) -> list[Arrival]:
    """Every arrival of the open-loop flows (not ``closed``) before the horizon, by time.

    Ties are ordered by flow, stream and sequence, so the order is deterministic.
    """
    out: list[Arrival] = []
    for flow_index, flow in enumerate(workload.flows):
        if flow.arrival == "closed":
            continue
        for stream in range(flow.streams):
            rng = stream_rng(workload, flow_index, stream)
            t = float(flow.start_ns)
            for seq in range(flow.requests):
                if flow.arrival == "poisson":
                    t += rng.expovariate(1.0 / flow.interval_ns)
                elif flow.arrival == "periodic" and seq:
                    t += flow.interval_ns
                at = math.floor(t)
                if at >= workload.horizon_ns:
                    break
                size = draw(rng, flow.size_bytes)
                window = draw(rng, flow.window_ns)
                out.append(
                    Arrival(
                        t_ns=at,
                        flow=flow_index,
                        stream=stream,
                        seq=seq,
                        size=size,
                        window_ns=window,
                    )
                )
    out.sort(key=lambda a: (a.t_ns, a.flow, a.stream, a.seq))
    return out


# --------------------------------------------------------------------------- JSON


def _link(data: Mapping[str, Any]) -> LinkSpec:
    fields = dict(data)
    if "rate_changes" in fields:
        fields["rate_changes"] = tuple(tuple(pair) for pair in fields["rate_changes"])
    return LinkSpec(**fields)


def workload_from_mapping(data: Mapping[str, Any]) -> Workload:
    """Build a :class:`Workload` from its JSON structure; raises ConfigError when malformed."""
    try:
        return Workload(
            name=data["name"],
            description=data.get("description", ""),
            seed=data.get("seed", 1),
            nics=tuple(_link(n) for n in data["nics"]),
            config=data.get("config", {}),
            flows=tuple(FlowSpec(**f) for f in data["flows"]),
            horizon_ns=data["horizon_ns"],
            drain_ns=data.get("drain_ns", 1_000_000_000),
            measure_ns=tuple(data["measure_ns"]) if "measure_ns" in data else None,
            batch_same_time=data.get("batch_same_time", False),
        )
    except (KeyError, TypeError, InvalidArgument) as exc:
        raise ConfigError(f"invalid workload: {exc!r}") from exc


def load_workload(path: Path) -> Workload:
    """Read a workload JSON file; raises ConfigError if it cannot be read or is malformed."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read workload {path}: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ConfigError("a workload file holds one JSON object")
    return workload_from_mapping(data)
