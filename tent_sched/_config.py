"""Scheduling configuration: Deadline Scheduling's JSON keys as frozen, validated values.

``load_config`` reads an engine configuration (a parsed mapping or JSON text) and returns a
:class:`SchedulingConfig` with three parts: ``enable_runtime_queue``, the ``runtime_queue/*``
keys (:class:`RuntimeQueueConfig`) and the scheduling keys of ``transports/rdma``
(:class:`RdmaSchedulingConfig`). Defaults are Deadline Scheduling's tables.

Rules (every failure is a :class:`~tent_sched.errors.ConfigError` naming the key's path, e.g.
``runtime_queue/max_dispatch_bytes``):

1. Types are strict: an int field takes an int (a bool is *not* an int, nor is ``1024.0``); a
   float field takes an int or a float (finite); a bool field takes only ``true``/``false``.
2. Unknown keys under ``runtime_queue`` are errors (a typo must not silently disable a limit);
   the message suggests the closest known key.
   Other sections, and keys of ``transports/rdma`` that are not scheduling keys, are ignored, so
   a whole engine configuration loads. Duplicate keys in JSON text are errors.
3. Ranges: counts and byte limits are u64 (``progress_fallback_interval_us`` an int64, as the
   reference reads it); the dispatch window (``max_dispatch_owners``, ``max_dispatch_bytes``)
   must be > 0, the outstanding maxima may be 0 (a queue that admits nothing, as in the
   reference); a staging reserve may not exceed its maximum; ``mlu_local_threshold`` is any
   finite number (≤ 0: the drop is off; below 1.0 the queue logs a warning unless
   ``allow_aggressive_threshold``, our addition, acknowledges it:
   docs/semantics.md#admission-queue); learning rates outside [0, 1] are clamped into it, and
   the clamp logged (as the reference does); ``transmit_meter_interval_ns`` may be 0 (sample at
   every pass); the other intervals, multipliers and bandwidths are > 0 with min ≤ max.
4. ``transmit_meter_max_interval_ns`` smaller than ``transmit_meter_interval_ns`` is raised to
   it (docs/semantics.md#bandwidth-series), not rejected.
5. As the reference's ``Config`` reads a path: a key may also be written flat at the top level
   (``"runtime_queue/max_dispatch_owners": 8``, ``"transports/rdma/max_qp_wr": 16``); the same
   value nested and flat is one value, two different values are an error. A JSON ``null``, for
   a section or a value, is "not set": its defaults apply.

Deadline Scheduling "Configuration" says of ``enable_runtime_queue``: "Everything under
``runtime_queue/`` is read only when this is on". With the queue off the section is not read at
all (not even its key names): ``runtime_queue`` holds the defaults, so a configuration the
reference accepts loads here too, and its queue settings are checked on the day the queue is
switched on.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import attrs

from ._bandwidth import clamp_rate
from ._describe import describe
from ._queue import U64_MAX, AdmissionQueue, QueueLimits
from .errors import ConfigError

__all__ = [
    "RdmaSchedulingConfig",
    "RuntimeQueueConfig",
    "SchedulingConfig",
    "load_config",
]

_Validator: TypeAlias = Callable[[Any, "attrs.Attribute[Any]", Any], None]
_I64_MAX = (1 << 63) - 1
_BOUND_NAMES = {U64_MAX: "2**64 - 1", _I64_MAX: "2**63 - 1"}  # how a message writes a maximum


def _path(section: str, attr: attrs.Attribute[Any]) -> str:
    return f"{section}/{attr.name}" if section else attr.name


def _int(section: str, minimum: int = 0, maximum: int = U64_MAX) -> _Validator:
    """An int (bool excluded) in [``minimum``, ``maximum``] (a u64 by default)."""
    top = _BOUND_NAMES.get(maximum, str(maximum))

    def check(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if type(value) is not int:
            raise ConfigError(f"{_path(section, attr)} must be an int, got {describe(value)}")
        if not minimum <= value <= maximum:
            raise ConfigError(
                f"{_path(section, attr)} must be in [{minimum}, {top}], got {describe(value)}"
            )

    return check


def _real(
    section: str, *, low: float, high: float = math.inf, low_open: bool = False
) -> _Validator:
    """A finite int or float (bool excluded) in [low, high], or (low, high] if ``low_open``."""

    def check(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ConfigError(
                f"{_path(section, attr)} must be a finite number, got {describe(value)}"
            )
        if value < low or value > high or (low_open and value == low):
            bounds = f"{'(' if low_open else '['}{low}, {high}]"
            raise ConfigError(f"{_path(section, attr)} must be in {bounds}, got {describe(value)}")

    return check


def _bandwidth_rate(value: Any) -> Any:
    return clamp_rate(f"{_RDMA}/bandwidth_learning_rate", value)


def _transmit_rate(value: Any) -> Any:
    return clamp_rate(f"{_RDMA}/transmit_bandwidth_learning_rate", value)


def _bool(section: str) -> _Validator:
    def check(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if type(value) is not bool:
            raise ConfigError(f"{_path(section, attr)} must be a bool, got {describe(value)}")

    return check


_RQ = "runtime_queue"
_RDMA = "transports/rdma"


@attrs.frozen(kw_only=True)
class RuntimeQueueConfig:
    """The ``runtime_queue/*`` keys (Deadline Scheduling "Configuration → Admission Queue").

    ``allow_aggressive_threshold`` is our addition: it acknowledges an ``mlu_local_threshold``
    in (0, 1), which the queue otherwise accepts with a logged warning. Raises ConfigError
    (naming ``runtime_queue/<key>``) on any invalid value; see the module docstring for the
    rules.
    """

    max_outstanding_owners: int = attrs.field(default=1024, validator=_int(_RQ))
    max_outstanding_bytes: int = attrs.field(default=1 << 30, validator=_int(_RQ))
    staging_owner_reserve: int = attrs.field(default=0, validator=_int(_RQ))
    staging_byte_reserve: int = attrs.field(default=0, validator=_int(_RQ))
    max_dispatch_owners: int = attrs.field(default=64, validator=_int(_RQ, 1))
    max_dispatch_bytes: int = attrs.field(default=64 << 20, validator=_int(_RQ, 1))
    deadline_aware: bool = attrs.field(default=False, validator=_bool(_RQ))
    promotion_slack_ns: int = attrs.field(default=0, validator=_int(_RQ))
    mlu_local_threshold: float = attrs.field(default=0.0, validator=_real(_RQ, low=-math.inf))
    allow_aggressive_threshold: bool = attrs.field(default=False, validator=_bool(_RQ))
    # an int64 of microseconds, as the reference reads it (a u64 beyond it would wrap there)
    progress_fallback_interval_us: int = attrs.field(
        default=50_000, validator=_int(_RQ, maximum=_I64_MAX)
    )

    def __attrs_post_init__(self) -> None:
        if self.staging_owner_reserve > self.max_outstanding_owners:
            raise ConfigError(
                f"{_RQ}/staging_owner_reserve {self.staging_owner_reserve} exceeds "
                f"{_RQ}/max_outstanding_owners {self.max_outstanding_owners}"
            )
        if self.staging_byte_reserve > self.max_outstanding_bytes:
            raise ConfigError(
                f"{_RQ}/staging_byte_reserve {self.staging_byte_reserve} exceeds "
                f"{_RQ}/max_outstanding_bytes {self.max_outstanding_bytes}"
            )

    def limits(self) -> QueueLimits:
        """The queue's capacity limits."""
        return QueueLimits(
            max_outstanding_owners=self.max_outstanding_owners,
            max_outstanding_bytes=self.max_outstanding_bytes,
            staging_owner_reserve=self.staging_owner_reserve,
            staging_byte_reserve=self.staging_byte_reserve,
        )


@attrs.frozen(kw_only=True)
class RdmaSchedulingConfig:
    """The scheduling keys of ``transports/rdma`` (arbitration, both bandwidth series).

    Raises ConfigError (naming ``transports/rdma/<key>``) on an invalid value. A
    ``transmit_meter_max_interval_ns`` below the interval is raised to the interval (§4).
    """

    deadline_bw_arbitration: bool = attrs.field(default=False, validator=_bool(_RDMA))
    transmit_bandwidth_learning_rate: float = attrs.field(
        default=0.9,
        converter=_transmit_rate,
        validator=_real(_RDMA, low=0.0, high=1.0),
    )
    transmit_meter_interval_ns: int = attrs.field(default=10_000_000, validator=_int(_RDMA))
    transmit_meter_max_interval_ns: int = attrs.field(default=50_000_000, validator=_int(_RDMA, 1))
    bandwidth_learning_rate: float = attrs.field(
        default=0.01,
        converter=_bandwidth_rate,
        validator=_real(_RDMA, low=0.0, high=1.0),
    )
    ewma_min_bandwidth_multiplier: float = attrs.field(
        default=0.1, validator=_real(_RDMA, low=0.0, low_open=True)
    )
    ewma_max_bandwidth_multiplier: float = attrs.field(
        default=10.0, validator=_real(_RDMA, low=0.0, low_open=True)
    )
    default_bandwidth_gbps: float = attrs.field(
        default=400, validator=_real(_RDMA, low=0.0, low_open=True)
    )
    min_bandwidth_gbps: float = attrs.field(
        default=10, validator=_real(_RDMA, low=0.0, low_open=True)
    )
    max_bandwidth_gbps: float = attrs.field(
        default=800, validator=_real(_RDMA, low=0.0, low_open=True)
    )
    max_qp_wr: int = attrs.field(default=256, validator=_int(_RDMA, 1))

    def __attrs_post_init__(self) -> None:
        if self.ewma_min_bandwidth_multiplier > self.ewma_max_bandwidth_multiplier:
            raise ConfigError(
                f"{_RDMA}/ewma_min_bandwidth_multiplier {self.ewma_min_bandwidth_multiplier} "
                f"exceeds {_RDMA}/ewma_max_bandwidth_multiplier "
                f"{self.ewma_max_bandwidth_multiplier}"
            )
        if self.min_bandwidth_gbps > self.max_bandwidth_gbps:
            raise ConfigError(
                f"{_RDMA}/min_bandwidth_gbps {self.min_bandwidth_gbps} exceeds "
                f"{_RDMA}/max_bandwidth_gbps {self.max_bandwidth_gbps}"
            )
        if self.transmit_meter_max_interval_ns < self.transmit_meter_interval_ns:
            # docs/semantics.md#bandwidth-series: the max interval is raised to the interval if
            # smaller.
            object.__setattr__(
                self, "transmit_meter_max_interval_ns", self.transmit_meter_interval_ns
            )


@attrs.frozen(kw_only=True)
class SchedulingConfig:
    """Everything deadline scheduling reads from an engine configuration."""

    enable_runtime_queue: bool = attrs.field(default=False, validator=_bool(""))
    runtime_queue: RuntimeQueueConfig = attrs.field(factory=RuntimeQueueConfig)
    rdma: RdmaSchedulingConfig = attrs.field(factory=RdmaSchedulingConfig)

    def make_queue(self) -> AdmissionQueue:
        """A new, empty :class:`AdmissionQueue` configured from ``runtime_queue``.

        Built whatever ``enable_runtime_queue`` says: whether submits go through it is the
        engine's decision.
        """
        rq = self.runtime_queue
        return AdmissionQueue(
            rq.limits(),
            deadline_aware=rq.deadline_aware,
            promotion_slack_ns=rq.promotion_slack_ns,
            mlu_local_threshold=rq.mlu_local_threshold,
            allow_aggressive_threshold=rq.allow_aggressive_threshold,
            max_dispatch_bytes=rq.max_dispatch_bytes,
        )


_RUNTIME_QUEUE_KEYS = frozenset(a.name for a in attrs.fields(RuntimeQueueConfig))
_RDMA_KEYS = frozenset(a.name for a in attrs.fields(RdmaSchedulingConfig))


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ConfigError(f"duplicate key {describe(key)} in configuration JSON")
        result[key] = value
    return result


def _section(parent: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    value = parent.get(key)
    if value is None:  # missing or JSON null: the defaults, as the reference reads it
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path} must be an object, got {type(value).__name__}")
    return value


def _values(data: Mapping[str, Any], nested: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The keys of the section at ``path`` (``runtime_queue``, ``transports/rdma``): its nested
    object's, and each written flat at the top level as ``"<path>/<key>"`` (the reference's
    ``Config`` reads a path either way). The same value twice is one; two different values
    are a ConfigError naming the path. A null value is left out: its default applies."""
    values = {k: v for k, v in nested.items() if v is not None}
    prefix = path + "/"
    for flat, value in data.items():
        if not isinstance(flat, str) or not flat.startswith(prefix) or value is None:
            continue
        key = flat[len(prefix) :]
        if key in values and values[key] != value:
            raise ConfigError(
                f"{flat} is given twice with different values ({describe(values[key])} nested, "
                f"{describe(value)} flat)"
            )
        values[key] = value
    return values


def parse_config_json(text: str | bytes) -> Mapping[str, Any]:
    """Parse configuration JSON text into its top-level object.

    Raises ConfigError on invalid JSON, a duplicate key at any depth (JSON would silently keep
    the last one, so a pasted override could hide a limit) or a top level that is not an object.
    Engines that extend Deadline Scheduling's keys (``tent_transport``) parse with this too, so both
    layers refuse the same documents.
    """
    try:
        data = json.loads(text, object_pairs_hook=_reject_duplicate_keys)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"configuration is not valid JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"configuration must be an object, got {type(data).__name__}")
    return data


def load_config(data: Mapping[str, Any] | str | bytes) -> SchedulingConfig:
    """Read the scheduling part of an engine configuration (a mapping or JSON text).

    Missing keys take Deadline Scheduling's defaults. Raises ConfigError on invalid JSON, a
    non-object where an object is expected, an unknown ``runtime_queue`` key, or any invalid value
    (the message names the key's path); see the module docstring for every rule.
    """
    if isinstance(data, str | bytes):
        data = parse_config_json(data)
    if not isinstance(data, Mapping):
        raise ConfigError(f"configuration must be an object, got {type(data).__name__}")

    enabled = data.get("enable_runtime_queue")
    enabled = False if enabled is None else enabled
    queue = RuntimeQueueConfig()
    if enabled is True:  # "Everything under runtime_queue/ is read only when this is on"
        queue_section = _values(data, _section(data, "runtime_queue", _RQ), _RQ)
        for key in queue_section:
            if key not in _RUNTIME_QUEUE_KEYS:
                close = difflib.get_close_matches(str(key), sorted(_RUNTIME_QUEUE_KEYS), n=1)
                hint = f"; did you mean {_RQ}/{close[0]}?" if close else ""
                raise ConfigError(f"unknown key {_RQ}/{key}{hint}")
        queue = RuntimeQueueConfig(**queue_section)
    rdma = _section(_section(data, "transports", "transports"), "rdma", _RDMA)
    rdma_section = _values(data, rdma, _RDMA)

    return SchedulingConfig(
        enable_runtime_queue=enabled,
        runtime_queue=queue,
        rdma=RdmaSchedulingConfig(**{k: v for k, v in rdma_section.items() if k in _RDMA_KEYS}),
    )
