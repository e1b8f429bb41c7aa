"""The two per-NIC bandwidth series and their NIC-set aggregates
(docs/semantics.md#bandwidth-series).

Each NIC keeps two estimates, learned from the same completion events along two loops:

* the **selection EWMA** (α = ``bandwidth_learning_rate``, 0.01): one sample per successful
  completion, ``length / (poll_ns - submit_ns)``. It contains the slice's wait behind earlier work
  on purpose: device selection (:mod:`tent_sched._scoring`) wants a backed-up NIC to lose.
* the **transmit estimate** (α = ``transmit_bandwidth_learning_rate``, 0.9): completed bytes over
  NIC *busy* time, sampled at most once per ``transmit_meter_interval_ns`` at the last completion
  of a poll pass. It excludes queueing and idle gaps on purpose: the admission drop and the
  arbitration add the queueing term themselves through ``bytes_ahead``.

Both learn ``new = α·old + (1 − α)·sample`` and clamp the smoothed value to
[``ewma_min_bandwidth_multiplier`` × seed, ``ewma_max_bandwidth_multiplier`` × seed]. The seed is
the link speed (Gb/s × 1e9 / 8) when it lies in [``min_bandwidth_gbps``, ``max_bandwidth_gbps``],
else ``default_bandwidth_gbps``; an unknown speed (0) also takes the default.

Sans-IO: every timestamp is an argument; nothing here reads a clock. Bandwidths are bytes/second.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from typing import Any, Protocol

import attrs

from ._describe import describe
from .errors import ConfigError, InvalidArgument, InvalidEntry

__all__ = [
    "MeterParams",
    "NicDevice",
    "NicSet",
    "NicStatistics",
    "seed_bandwidth_bps",
]

_U64_MAX = (1 << 64) - 1
_log = logging.getLogger(__name__)
# docs/semantics.md#bandwidth-series: an aggregate sum <= 0 reads as -1 (no usable bandwidth)
_NO_BANDWIDTH = -1.0


def _check_int(name: str, value: object, minimum: int = 0) -> int:
    """Return ``value`` if it is an ``int`` (not ``bool``) in [``minimum``, 2**64 - 1] (byte
    counters and timestamps are u64), else raise IA."""
    if type(value) is not int or not minimum <= value <= _U64_MAX:
        raise InvalidArgument(
            f"{name} must be an int in [{minimum}, 2**64 - 1], got {describe(value)}"
        )
    return value


def _check_real(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a finite int or float (not ``bool``), else raise IA."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
        raise InvalidArgument(f"{name} must be a finite number, got {describe(value)}")
    return float(value)


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond the float range
        return False


def clamp_rate(name: str, value: Any) -> Any:
    """A learning rate as the series use it: a finite number outside [0, 1] is clamped into it
    and the clamp logged, as the reference's ``setSchedulingParams`` does (a configuration it
    accepts loads here too); anything else is returned for the validator to refuse. The
    converters of the fields that hold one call it under the field's name."""
    number = isinstance(value, int | float) and not isinstance(value, bool) and _finite(value)
    if not number or 0.0 <= value <= 1.0:
        return value
    clamped = min(1.0, max(0.0, float(value)))
    _log.warning("%s %r is outside [0, 1]: clamped to %s", name, value, clamped)
    return clamped


def _bandwidth_rate(value: Any) -> Any:
    return clamp_rate("bandwidth_learning_rate", value)


def _transmit_rate(value: Any) -> Any:
    return clamp_rate("transmit_bandwidth_learning_rate", value)


def _rate(_inst: object, attr: attrs.Attribute[float], value: float) -> None:
    if type(value) not in (int, float) or not _finite(value):
        raise ConfigError(f"{attr.name} must be a finite number, got {describe(value)}")


def _interval(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 0:
        raise ConfigError(f"{attr.name} must be an int >= 0, got {describe(value)}")


def _positive_real(_inst: object, attr: attrs.Attribute[float], value: float) -> None:
    if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{attr.name} must be a finite number > 0, got {describe(value)}")


def _positive_int(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value <= 0:
        raise ConfigError(f"{attr.name} must be an int > 0, got {describe(value)}")


@attrs.frozen(kw_only=True)
class MeterParams:
    """What the bandwidth series need from the RDMA scheduling configuration
    (docs/semantics.md#bandwidth-series).

    Defaults are the reference's. Construction validates every field and raises
    :class:`~tent_sched.errors.ConfigError` (an ``InvalidArgument``) on:

    1. a learning rate that is not a finite number (α weights the *old* value: 0 = take the
       latest sample, 1 = never learn); one outside [0, 1] is clamped into it, and the clamp
       logged, as the reference does;
    2. ``transmit_meter_interval_ns`` not an int ≥ 0 (0: sample at every pass that asks, as the
       reference's meter tests run it), ``transmit_meter_max_interval_ns`` not an int > 0;
    3. a multiplier or speed that is not a finite number > 0, ``ewma_min_bandwidth_multiplier >
       ewma_max_bandwidth_multiplier`` or ``min_bandwidth_gbps > max_bandwidth_gbps``.

    ``transmit_meter_max_interval_ns`` smaller than the interval is raised to the interval, as
    in the reference.
    """

    bandwidth_learning_rate: float = attrs.field(
        default=0.01, converter=_bandwidth_rate, validator=_rate
    )
    transmit_bandwidth_learning_rate: float = attrs.field(
        default=0.9, converter=_transmit_rate, validator=_rate
    )
    transmit_meter_interval_ns: int = attrs.field(default=10_000_000, validator=_interval)
    transmit_meter_max_interval_ns: int = attrs.field(default=50_000_000, validator=_positive_int)
    ewma_min_bandwidth_multiplier: float = attrs.field(default=0.1, validator=_positive_real)
    ewma_max_bandwidth_multiplier: float = attrs.field(default=10.0, validator=_positive_real)
    default_bandwidth_gbps: float = attrs.field(default=400.0, validator=_positive_real)
    min_bandwidth_gbps: float = attrs.field(default=10.0, validator=_positive_real)
    max_bandwidth_gbps: float = attrs.field(default=800.0, validator=_positive_real)

    def __attrs_post_init__(self) -> None:
        if self.ewma_min_bandwidth_multiplier > self.ewma_max_bandwidth_multiplier:
            raise ConfigError(
                "ewma_min_bandwidth_multiplier must be <= ewma_max_bandwidth_multiplier, got "
                f"{describe(self.ewma_min_bandwidth_multiplier)} > "
                f"{describe(self.ewma_max_bandwidth_multiplier)}"
            )
        if self.min_bandwidth_gbps > self.max_bandwidth_gbps:
            raise ConfigError(
                "min_bandwidth_gbps must be <= max_bandwidth_gbps, got "
                f"{describe(self.min_bandwidth_gbps)} > {describe(self.max_bandwidth_gbps)}"
            )
        if self.transmit_meter_max_interval_ns < self.transmit_meter_interval_ns:
            # docs/semantics.md#bandwidth-series: the max interval is raised to the interval if
            # smaller.
            object.__setattr__(
                self, "transmit_meter_max_interval_ns", self.transmit_meter_interval_ns
            )

    @classmethod
    def from_config(cls, config: _MeterConfigLike) -> MeterParams:
        """Build the meter parameters from any object with the same attribute names.

        Duck-typed so this module does not import the configuration module; the RDMA scheduling
        configuration has every field. Raises ``ConfigError`` as the constructor does.
        """
        return cls(
            bandwidth_learning_rate=config.bandwidth_learning_rate,
            transmit_bandwidth_learning_rate=config.transmit_bandwidth_learning_rate,
            transmit_meter_interval_ns=config.transmit_meter_interval_ns,
            transmit_meter_max_interval_ns=config.transmit_meter_max_interval_ns,
            ewma_min_bandwidth_multiplier=config.ewma_min_bandwidth_multiplier,
            ewma_max_bandwidth_multiplier=config.ewma_max_bandwidth_multiplier,
            default_bandwidth_gbps=config.default_bandwidth_gbps,
            min_bandwidth_gbps=config.min_bandwidth_gbps,
            max_bandwidth_gbps=config.max_bandwidth_gbps,
        )


class _MeterConfigLike(Protocol):
    """The attributes :meth:`MeterParams.from_config` reads."""

    @property
    def bandwidth_learning_rate(self) -> float: ...
    @property
    def transmit_bandwidth_learning_rate(self) -> float: ...
    @property
    def transmit_meter_interval_ns(self) -> int: ...
    @property
    def transmit_meter_max_interval_ns(self) -> int: ...
    @property
    def ewma_min_bandwidth_multiplier(self) -> float: ...
    @property
    def ewma_max_bandwidth_multiplier(self) -> float: ...
    @property
    def default_bandwidth_gbps(self) -> float: ...
    @property
    def min_bandwidth_gbps(self) -> float: ...
    @property
    def max_bandwidth_gbps(self) -> float: ...


def seed_bandwidth_bps(link_speed_gbps: float, params: MeterParams) -> float:
    """The seed of both series for a link speed in Gb/s, in bytes/second
    (docs/semantics.md#bandwidth-series).

    ``link_speed_gbps × 1e9 / 8`` when ``min_bandwidth_gbps <= speed <= max_bandwidth_gbps``,
    else ``default_bandwidth_gbps × 1e9 / 8`` (an unknown speed, 0, takes the default).
    Raises ``InvalidArgument`` for a negative or non-finite speed.
    """
    speed = _check_real("link_speed_gbps", link_speed_gbps)
    if speed < 0:
        raise InvalidArgument(f"link_speed_gbps must be >= 0, got {describe(link_speed_gbps)}")
    if params.min_bandwidth_gbps <= speed <= params.max_bandwidth_gbps:
        return speed * 1e9 / 8
    return params.default_bandwidth_gbps * 1e9 / 8


@attrs.frozen(kw_only=True)
class NicStatistics:
    """A snapshot of one NIC's bandwidth state (what :meth:`NicDevice.statistics` returns).

    ``busy_ns`` is the banked busy time of closed stretches; ``busy_open_since_ns`` is the start
    of the open stretch (``None`` when idle). ``transmit_baseline_ns`` is the time of the last
    transmit baseline (``None`` before the first sample and after a reset).
    """

    name: str
    available: bool
    link_speed_gbps: float
    seed_bps: float
    selection_bps: float
    transmit_bps: float
    posted_bytes: int
    completed_bytes: int
    busy_ns: int
    busy_open_since_ns: int | None
    transmit_baseline_ns: int | None
    transmit_baseline_bytes: int
    transmit_baseline_busy_ns: int
    selection_samples: int
    transmit_samples: int


class NicDevice:
    """Per-NIC bandwidth state: posted/completed bytes, busy time and the two series.

    A transport calls, per slice: :meth:`note_posted` when it posts the slice,
    :meth:`note_post_ended` when the slice leaves the NIC (completed, failed, flushed or
    re-routed), :meth:`note_completed` for a polled completion, and after the last completion of a
    poll pass :meth:`maybe_sample_transmit` with that pass's timestamp. Every call validates its
    arguments before it changes anything: a raised ``InvalidArgument`` leaves the device as it was.
    """

    __slots__ = (
        "_available",
        "_baseline_busy_ns",
        "_baseline_bytes",
        "_baseline_ns",
        "_busy_ns",
        "_completed_bytes",
        "_link_speed_gbps",
        "_name",
        "_open_since_ns",
        "_params",
        "_posted_bytes",
        "_seed_bps",
        "_selection_bps",
        "_selection_samples",
        "_transmit_bps",
        "_transmit_samples",
    )

    def __init__(
        self,
        name: str,
        *,
        link_speed_gbps: float = 0.0,
        params: MeterParams | None = None,
        available: bool = True,
    ) -> None:
        """Create a NIC seeded from ``link_speed_gbps`` (0 = unknown → default speed).

        Raises ``InvalidArgument`` for an empty name, a negative or non-finite speed, a non-bool
        ``available`` or ``params`` that is not a :class:`MeterParams`.
        """
        if type(name) is not str or not name:
            raise InvalidArgument(f"NIC name must be a non-empty str, got {describe(name)}")
        if type(available) is not bool:
            raise InvalidArgument(f"available must be a bool, got {describe(available)}")
        if params is None:
            params = MeterParams()
        elif not isinstance(params, MeterParams):
            raise InvalidArgument(f"params must be MeterParams, got {describe(params)}")
        seed = seed_bandwidth_bps(link_speed_gbps, params)
        self._name = name
        self._params = params
        self._available = available
        self._link_speed_gbps = float(link_speed_gbps)
        self._seed_bps = seed
        self._selection_bps = seed
        self._transmit_bps = seed
        self._posted_bytes = 0
        self._completed_bytes = 0
        self._busy_ns = 0
        self._open_since_ns: int | None = None
        self._baseline_ns: int | None = None
        self._baseline_bytes = 0
        self._baseline_busy_ns = 0
        self._selection_samples = 0
        self._transmit_samples = 0

    # -- read side -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The NIC's name (unique within a :class:`NicSet`)."""
        return self._name

    @property
    def params(self) -> MeterParams:
        """The meter parameters this NIC learns with."""
        return self._params

    @property
    def available(self) -> bool:
        """Whether the NIC counts in aggregates and can be selected."""
        return self._available

    @property
    def seed_bps(self) -> float:
        """The seed of both series, bytes/second."""
        return self._seed_bps

    @property
    def selection_bps(self) -> float:
        """The selection EWMA, bytes/second (device selection reads it)."""
        return self._selection_bps

    @property
    def transmit_bps(self) -> float:
        """The transmit estimate, bytes/second (the admission drop and arbitration read it)."""
        return self._transmit_bps

    @property
    def posted_bytes(self) -> int:
        """Bytes posted to the NIC and not yet ended (the arbitration's initial ``bytes_ahead``)."""
        return self._posted_bytes

    @property
    def completed_bytes(self) -> int:
        """Bytes of successful completions since creation (monotonic)."""
        return self._completed_bytes

    def busy_at(self, now_ns: int) -> int:
        """Total busy time up to ``now_ns``: banked stretches plus the open one, if any.

        An open stretch contributes ``now_ns - opened_at`` when positive, else nothing.
        Raises ``InvalidArgument`` for a negative or non-int ``now_ns``.
        """
        _check_int("now_ns", now_ns)
        if self._open_since_ns is not None and now_ns > self._open_since_ns:
            return self._busy_ns + (now_ns - self._open_since_ns)
        return self._busy_ns

    def statistics(self) -> NicStatistics:
        """A frozen snapshot of every field of the device."""
        return NicStatistics(
            name=self._name,
            available=self._available,
            link_speed_gbps=self._link_speed_gbps,
            seed_bps=self._seed_bps,
            selection_bps=self._selection_bps,
            transmit_bps=self._transmit_bps,
            posted_bytes=self._posted_bytes,
            completed_bytes=self._completed_bytes,
            busy_ns=self._busy_ns,
            busy_open_since_ns=self._open_since_ns,
            transmit_baseline_ns=self._baseline_ns,
            transmit_baseline_bytes=self._baseline_bytes,
            transmit_baseline_busy_ns=self._baseline_busy_ns,
            selection_samples=self._selection_samples,
            transmit_samples=self._transmit_samples,
        )

    # -- configuration ---------------------------------------------------------------------

    def set_available(self, available: bool) -> None:
        """Mark the NIC usable or not; raises ``InvalidArgument`` for a non-bool."""
        if type(available) is not bool:
            raise InvalidArgument(f"available must be a bool, got {describe(available)}")
        self._available = available

    def set_link_speed(self, link_speed_gbps: float) -> None:
        """Set the link speed and re-seed both series to the new seed.

        See docs/semantics.md#bandwidth-series.

        Counters, busy time and the transmit baseline are kept. Raises ``InvalidArgument`` for a
        negative or non-finite speed; the device is then unchanged.
        """
        seed = seed_bandwidth_bps(link_speed_gbps, self._params)
        self._link_speed_gbps = float(link_speed_gbps)
        self._seed_bps = seed
        self._selection_bps = seed
        self._transmit_bps = seed

    # -- completion path -------------------------------------------------------------------

    def note_posted(self, length: int, now_ns: int) -> None:
        """Record ``length`` bytes posted at ``now_ns``.

        A busy stretch opens when posted bytes go from 0 to non-zero
        (docs/semantics.md#bandwidth-series). Raises ``InvalidArgument`` for ``length <= 0`` or a
        negative ``now_ns``; nothing changes.
        """
        _check_int("length", length, 1)
        _check_int("now_ns", now_ns)
        if self._posted_bytes == 0:
            self._open_since_ns = now_ns
        self._posted_bytes += length

    def note_post_ended(self, length: int, now_ns: int) -> None:
        """Record that ``length`` posted bytes left the NIC at ``now_ns`` (any outcome).

        When posted bytes return to 0 the open stretch closes and banks ``now_ns - opened_at``;
        a close with ``now_ns <= opened_at`` banks nothing (docs/semantics.md#bandwidth-series).
        Raises
        ``InvalidArgument`` for ``length <= 0``, a negative ``now_ns`` or ``length`` larger than
        the posted bytes; nothing changes.
        """
        _check_int("length", length, 1)
        _check_int("now_ns", now_ns)
        if length > self._posted_bytes:
            raise InvalidArgument(
                f"{self._name}: {describe(length)} bytes ended but only {self._posted_bytes} "
                "are posted"
            )
        self._posted_bytes -= length
        if self._posted_bytes == 0 and self._open_since_ns is not None:
            if now_ns > self._open_since_ns:
                self._busy_ns += now_ns - self._open_since_ns
            self._open_since_ns = None

    def note_completed(self, length: int, *, submit_ns: int, poll_ns: int, success: bool) -> None:
        """Record a polled completion of a slice of ``length`` bytes posted at ``submit_ns``.

        1. ``success``: completed bytes grow by ``length``; if ``poll_ns > submit_ns`` the
           selection EWMA learns ``length / ((poll_ns - submit_ns) / 1e9)`` (a completion polled
           at its own post time has no measurable latency and teaches nothing).
        2. Failure (failed, flushed, timed out): nothing is counted, the selection EWMA learns
           nothing, and the transmit meter resets: its next sample only re-baselines.

        Raises ``InvalidArgument`` for ``length <= 0``, negative timestamps, ``poll_ns <
        submit_ns`` or a non-bool ``success``; nothing changes.
        """
        _check_int("length", length, 1)
        _check_int("submit_ns", submit_ns)
        _check_int("poll_ns", poll_ns)
        if poll_ns < submit_ns:
            raise InvalidArgument(f"poll_ns {poll_ns} is before submit_ns {submit_ns}")
        if type(success) is not bool:
            raise InvalidArgument(f"success must be a bool, got {describe(success)}")
        if not success:
            # docs/semantics.md#bandwidth-series: a failed or flushed completion resets
            self.reset_transmit_meter()
            return
        self._completed_bytes += length
        latency_ns = poll_ns - submit_ns
        if latency_ns > 0:
            sample = length / (latency_ns / 1e9)
            alpha = self._params.bandwidth_learning_rate
            self._selection_bps = self._learn(self._selection_bps, alpha, sample)
            self._selection_samples += 1

    def maybe_sample_transmit(self, now_ns: int) -> bool:
        """Take a transmit sample at the last completion of a poll pass; True if it learned.

        The policy (docs/semantics.md#bandwidth-series), in order:

        1. No baseline yet (first call, or first after :meth:`reset_transmit_meter`): record
           completed bytes, busy time and ``now_ns`` as the baseline; learn nothing.
        2. ``now_ns <= prev`` or ``now_ns - prev < interval`` → ignored, nothing changes
           (exactly one interval *is* sampled; one sampler per interval).
        3. Read completed bytes and busy time, and advance the baseline to them and ``now_ns``.
        4. ``now_ns - prev > max_interval`` → discarded (after the baseline advanced).
        5. Learn only if both deltas are > 0: sample = Δbytes / (Δbusy_ns / 1e9), then
           ``new = α·old + (1 − α)·sample`` clamped to the multipliers of the link-speed seed.

        Raises ``InvalidArgument`` for a negative or non-int ``now_ns``; nothing changes.
        """
        busy = self.busy_at(now_ns)  # validates now_ns
        prev = self._baseline_ns
        if prev is None:
            self._set_baseline(now_ns, busy)
            return False
        if now_ns <= prev or now_ns - prev < self._params.transmit_meter_interval_ns:
            return False
        delta_bytes = self._completed_bytes - self._baseline_bytes
        delta_busy_ns = busy - self._baseline_busy_ns
        self._set_baseline(now_ns, busy)
        if now_ns - prev > self._params.transmit_meter_max_interval_ns:
            return False  # describes a link too far in the past
        if delta_bytes <= 0 or delta_busy_ns <= 0:
            return False
        sample = delta_bytes / (delta_busy_ns / 1e9)
        alpha = self._params.transmit_bandwidth_learning_rate
        self._transmit_bps = self._learn(self._transmit_bps, alpha, sample)
        self._transmit_samples += 1
        return True

    def reset_transmit_meter(self) -> None:
        """Forget the transmit baseline: the next sample only re-baselines (counters stay)."""
        self._baseline_ns = None

    # -- internals -------------------------------------------------------------------------

    def _set_baseline(self, now_ns: int, busy_ns: int) -> None:
        self._baseline_ns = now_ns
        self._baseline_bytes = self._completed_bytes
        self._baseline_busy_ns = busy_ns

    def _learn(self, old: float, alpha: float, sample: float) -> float:
        """``α·old + (1 − α)·sample``, then clamp the smoothed value
        (docs/semantics.md#bandwidth-series)."""
        new = alpha * old + (1 - alpha) * sample
        low = self._params.ewma_min_bandwidth_multiplier * self._seed_bps
        high = self._params.ewma_max_bandwidth_multiplier * self._seed_bps
        return min(max(new, low), high)


class NicSet:
    """The NICs of one host by name, in registration order, with availability-aware aggregates.

    Aggregates sum the *available* NICs only; a sum <= 0 (no NIC, or none available) reads as
    ``-1.0``, which the admission drop and the arbitration treat as "no usable bandwidth".
    """

    __slots__ = ("_devices", "_params")

    def __init__(self, params: MeterParams | None = None) -> None:
        """Create an empty set whose NICs learn with ``params`` (defaults if omitted)."""
        if params is None:
            params = MeterParams()
        elif not isinstance(params, MeterParams):
            raise InvalidArgument(f"params must be MeterParams, got {describe(params)}")
        self._params = params
        self._devices: dict[str, NicDevice] = {}

    @property
    def params(self) -> MeterParams:
        """The parameters every NIC of the set learns with."""
        return self._params

    def add_device(
        self, name: str, *, link_speed_gbps: float = 0.0, available: bool = True
    ) -> NicDevice:
        """Create and register a NIC; returns it.

        Raises ``InvalidEntry`` if ``name`` is already registered and ``InvalidArgument`` for a
        bad name or speed; the set is then unchanged.
        """
        device = NicDevice(
            name, link_speed_gbps=link_speed_gbps, params=self._params, available=available
        )
        if name in self._devices:
            raise InvalidEntry(f"NIC {describe(name)} is already registered")
        self._devices[name] = device
        return device

    def device(self, name: str) -> NicDevice:
        """The NIC called ``name``; raises ``InvalidEntry`` if there is none."""
        try:
            return self._devices[name]
        except (KeyError, TypeError):
            raise InvalidEntry(f"no NIC named {describe(name)}") from None

    def __iter__(self) -> Iterator[NicDevice]:
        """The NICs in registration order (available or not)."""
        return iter(self._devices.values())

    def __len__(self) -> int:
        return len(self._devices)

    def __contains__(self, name: object) -> bool:
        return name in self._devices

    def estimated_bandwidth_bps(self) -> float:
        """Sum of the transmit estimates of available NICs, or -1.0 when that sum is <= 0.

        This is the admission queue's bandwidth provider (docs/semantics.md#bandwidth-series,
        "Aggregates").
        """
        return self._aggregate(True)

    def selection_bandwidth_bps(self) -> float:
        """Sum of the selection EWMAs of available NICs, or -1.0 when that sum is <= 0."""
        return self._aggregate(False)

    def _aggregate(self, transmit: bool) -> float:
        total = sum(
            (d.transmit_bps if transmit else d.selection_bps)
            for d in self._devices.values()
            if d.available
        )
        return total if total > 0 else _NO_BANDWIDTH
