"""Engine configuration: Deadline Scheduling's JSON plus ``receiver_credit`` and ``dispatch``.

``load_engine_config`` reads one engine configuration (a parsed mapping or JSON text):

* ``enable_runtime_queue``, ``runtime_queue/*`` and ``transports/rdma/*`` are read by
  :func:`tent_sched.load_config` (never parsed twice); its rules apply unchanged.
* ``receiver_credit`` (:class:`ReceiverCreditConfig`): ``enabled``, ``mode``
  (``disabled`` / ``optional`` / ``required``), ``default_qos_class``, the gate's legacy window
  and fallback, the receiver's capacities and its grant policy.
* ``dispatch`` (:class:`DispatchConfig`): how the dispatch core cuts and polls.
* ``merge_requests`` (bool, default false; the reference's key, whose default is true): the
  dispatch core merges a submit's contiguous requests into one owner (docs/transport.md
  "Batches, merging and cancel"). Off by default here: under receiver credit a merged owner
  must be granted all its requests' slots at once.

Rules (every failure is a :class:`~tent_transport.errors.ConfigError` naming the key's path):

1. Types are strict, as in :mod:`tent_sched`: a bool is not an int, an int field takes no float.
2. Unknown keys under ``receiver_credit``, ``receiver_credit/grant`` and ``dispatch`` are errors
   (a typo must not silently change a limit). Other top-level sections are ignored here, so the
   engine's own sections (control, TLS, metrics) live in the same document.
3. ``receiver_credit/enabled`` false means mode ``disabled``; naming ``optional`` or
   ``required`` while it is false is an error, and so is ``disabled`` while it is true. Enabled
   without a mode is ``required`` (fail closed: missing credit is never "unlimited").
4. Receiver credit needs the runtime queue: ``receiver_credit/enabled`` true with
   ``enable_runtime_queue`` false is refused at load (the reference's fail-closed opt-in).
5. Capacities and grant amounts name resources in lower case (``data_bytes``,
   ``request_slots``, ``staging_slots``, ``consumer_slots``); the allocator's own rules
   (:class:`tent_credit.AllocatorConfig`) are checked at load, whether or not credit is enabled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import attrs

from tent_credit import (
    SUPPORTED_VERSIONS,
    AllocatorConfig,
    CreditMode,
    CreditResource,
    GateConfig,
)
from tent_credit import errors as credit_errors
from tent_sched import SchedulingConfig, load_config, parse_config_json
from tent_sched import errors as sched_errors

from .errors import ConfigError

__all__ = [
    "DispatchConfig",
    "EngineConfig",
    "GrantPolicyConfig",
    "ReceiverCreditConfig",
    "load_engine_config",
]

_U32_MAX = (1 << 32) - 1
_U64_MAX = (1 << 64) - 1
_RC = "receiver_credit"
_GRANT = "receiver_credit/grant"
_DISPATCH = "dispatch"

_Validator: TypeAlias = Callable[[Any, "attrs.Attribute[Any]", Any], None]
ResourceAmounts: TypeAlias = Mapping[CreditResource, int]


def _int(section: str, minimum: int = 0, maximum: int = _U64_MAX) -> _Validator:
    def check(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if type(value) is not int:
            raise ConfigError(f"{section}/{attr.name} must be an int, got {value!r}")
        if not minimum <= value <= maximum:
            raise ConfigError(
                f"{section}/{attr.name} must be in [{minimum}, {maximum}], got {value}"
            )

    return check


def _versions(value: object) -> tuple[int, ...]:
    """``receiver_credit/versions``: a non-empty list of supported credit protocol versions."""
    if isinstance(value, tuple | list) and value and all(type(v) is int for v in value):
        versions = tuple(sorted(set(value)))
        if set(versions) <= set(SUPPORTED_VERSIONS):
            return versions
    raise ConfigError(
        f"{_RC}/versions must be a non-empty list of supported credit protocol versions "
        f"{list(SUPPORTED_VERSIONS)}, got {value!r}"
    )


def _bool(section: str) -> _Validator:
    def check(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if type(value) is not bool:
            raise ConfigError(f"{section}/{attr.name} must be a bool, got {value!r}")

    return check


def _resources(path: str) -> Callable[[object], ResourceAmounts]:
    """Converter: ``{"data_bytes": n, ...}`` (or already-typed keys) → ``{CreditResource: n}``."""

    def convert(value: object) -> ResourceAmounts:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path} must be an object, got {type(value).__name__}")
        out: dict[CreditResource, int] = {}
        for key, amount in value.items():
            if isinstance(key, CreditResource):
                resource = key
            elif isinstance(key, str) and key.upper() in CreditResource.__members__:
                resource = CreditResource[key.upper()]
            else:
                raise ConfigError(f"{path}: unknown credit resource {key!r}")
            if type(amount) is not int or not 0 <= amount <= _U64_MAX:
                raise ConfigError(
                    f"{path}/{resource.name.lower()} must be a u64 int, got {amount!r}"
                )
            if resource in out:
                raise ConfigError(f"{path}: resource {resource.name.lower()} named twice")
            out[resource] = amount
        return dict(sorted(out.items()))

    return convert


def _max_grant(value: object) -> ResourceAmounts:
    return _resources(f"{_GRANT}/max_grant")(value)


def _min_grant(value: object) -> ResourceAmounts:
    return _resources(f"{_GRANT}/min_grant")(value)


def _initial_grant(value: object) -> ResourceAmounts:
    return _resources(f"{_GRANT}/initial_grant")(value)


def _capacity(value: object) -> ResourceAmounts:
    return _resources(f"{_RC}/capacity")(value)


def _staging_reserve(value: object) -> ResourceAmounts:
    return _resources(f"{_RC}/staging_reserve")(value)


def _max_key_outstanding(value: object) -> ResourceAmounts:
    return _resources(f"{_RC}/max_key_outstanding")(value)


def _default_capacity() -> ResourceAmounts:
    return {
        CreditResource.DATA_BYTES: 1 << 30,
        CreditResource.REQUEST_SLOTS: 1024,
        CreditResource.STAGING_SLOTS: 64,
        CreditResource.CONSUMER_SLOTS: 1024,
    }


@attrs.frozen(kw_only=True)
class GrantPolicyConfig:
    """``receiver_credit/grant``: how the receiver carves grants
    (docs/semantics.md#receiver-allocator grant policy).

    ``max_grant`` bounds one grant per resource (missing: the resource's capacity),
    ``min_grant`` is the all-or-nothing floor of one grant (version 1), ``initial_grant`` what
    an activation grants up front (keep it small, RFC principle 3), ``retry_after_us`` the hint
    a blocked demand carries. ``chunk`` is grant-ahead's standing credit per key in whole
    charges (protocol version 2, docs/credit_protocol.md#grant-ahead): 0 (the default) adapts it
    to the key's fair share of the capacity; N fixes it at N, the RFC's lease batch.
    Raises ConfigError on a malformed value.
    """

    max_grant: ResourceAmounts = attrs.field(factory=dict, converter=_max_grant)
    min_grant: ResourceAmounts = attrs.field(factory=dict, converter=_min_grant)
    initial_grant: ResourceAmounts = attrs.field(factory=dict, converter=_initial_grant)
    retry_after_us: int = attrs.field(default=1000, validator=_int(_GRANT, 1))
    chunk: int = attrs.field(default=0, validator=_int(_GRANT, 0))


_MODES = {mode.value: mode for mode in CreditMode}


def _mode(value: object) -> CreditMode | None:
    if value is None or isinstance(value, CreditMode):
        return value
    if isinstance(value, str) and value in _MODES:
        return _MODES[value]
    raise ConfigError(f"{_RC}/mode must be one of {sorted(_MODES)}, got {value!r}")


@attrs.frozen(kw_only=True)
class ReceiverCreditConfig:
    """The ``receiver_credit`` section: both the sender's gate and the receiver's allocator.

    ``mode`` is resolved by rule 3 of the module docstring (``None`` given → ``disabled`` when
    not enabled, ``required`` when enabled). Raises ConfigError on any invalid value, including
    an :class:`tent_credit.AllocatorConfig` the capacities and grant policy cannot build.
    """

    enabled: bool = attrs.field(default=False, validator=_bool(_RC))
    mode: CreditMode | None = attrs.field(default=None, converter=_mode)
    default_qos_class: int = attrs.field(default=0, validator=_int(_RC, 0, _U32_MAX))
    legacy_window: int = attrs.field(default=8, validator=_int(_RC, 1))
    required_fallback: bool = attrs.field(default=False, validator=_bool(_RC))
    max_routes: int = attrs.field(default=64, validator=_int(_RC, 1))
    capacity: ResourceAmounts = attrs.field(factory=_default_capacity, converter=_capacity)
    staging_reserve: ResourceAmounts = attrs.field(factory=dict, converter=_staging_reserve)
    max_key_outstanding: ResourceAmounts = attrs.field(factory=dict, converter=_max_key_outstanding)
    """What one sender key may hold at once per resource (docs/abuse.md; missing: no cap below
    the capacity). Bounds a key whose demand is out of proportion, e.g. every free byte for
    one request slot, which the fair split alone would hand it."""
    control_slots: int = attrs.field(default=64, validator=_int(_RC, 1))
    max_keys: int = attrs.field(default=64, validator=_int(_RC, 1))
    freshness_ttl_ms: int = attrs.field(default=0, validator=_int(_RC, 0, _U32_MAX))
    refresh_interval_ns: int = attrs.field(default=0, validator=_int(_RC))
    usage_interval_ns: int = attrs.field(default=1_000_000, validator=_int(_RC))
    partial_hold_ns: int = attrs.field(default=1_000_000, validator=_int(_RC))
    """Version 2, at a receiver: how long a key that could only be granted part of its
    quantum waits for its own release to complete it (one grant and one update instead of
    two) before it is granted the part (docs/credit_protocol.md#partial-hold; 0: at once)."""
    level_hold_ns: int | None = attrs.field(default=None)
    """Version 2: how long a sender's idle credit lasts before it returns it with a report
    (docs/credit_protocol.md#grant-ahead; ``None``: 20 usage intervals)."""
    grant: GrantPolicyConfig = attrs.field(factory=GrantPolicyConfig)
    versions: tuple[int, ...] = attrs.field(default=SUPPORTED_VERSIONS, converter=_versions)
    """The credit protocol versions this engine offers as a sender and accepts as a receiver
    (the highest both ends share is used; docs/credit_protocol.md#grant-ahead). ``[1]`` pins
    version 1, the one the credit spec describes, e.g. for ``tent trace validate``."""

    def __attrs_post_init__(self) -> None:
        if self.mode is None:
            resolved = CreditMode.REQUIRED if self.enabled else CreditMode.DISABLED
            object.__setattr__(self, "mode", resolved)
        elif self.enabled and self.mode is CreditMode.DISABLED:
            raise ConfigError(f"{_RC}/mode is 'disabled' but {_RC}/enabled is true")
        elif not self.enabled and self.mode is not CreditMode.DISABLED:
            raise ConfigError(
                f"{_RC}/mode is {self.mode.value!r} but {_RC}/enabled is false; "
                f"set {_RC}/enabled to turn receiver credit on"
            )
        if not isinstance(self.grant, GrantPolicyConfig):
            raise ConfigError(f"{_GRANT} must be a GrantPolicyConfig")
        if self.level_hold_ns is not None:
            _int(_RC)(self, attrs.fields(ReceiverCreditConfig).level_hold_ns, self.level_hold_ns)
        self.allocator_config()  # rule 5: the allocator's rules are checked at load
        self.gate_config()

    @property
    def credit_mode(self) -> CreditMode:
        """The resolved mode (never ``None`` after construction)."""
        assert self.mode is not None
        return self.mode

    def allocator_config(self, *, staging_slots: int | None = None) -> AllocatorConfig:
        """The receiver's :class:`tent_credit.AllocatorConfig`; raises ConfigError if invalid.

        ``staging_slots`` (the receiver's staging pool, when known) caps the STAGING_SLOTS
        capacity: credit never promises a slot the pool does not have (a staged write granted
        one would be refused at landing, and its sender quarantined)."""
        capacity = dict(self.capacity)
        max_grant = {**capacity, **self.grant.max_grant}  # missing: the capacity
        staging = CreditResource.STAGING_SLOTS
        if staging_slots is not None and staging in capacity:
            capacity[staging] = min(capacity[staging], staging_slots)
            # a grant is at least 1 slot (the allocator's rule), never more than there are
            max_grant[staging] = max(1, min(max_grant.get(staging, 1), capacity[staging]))
        try:
            return AllocatorConfig(
                capacity=capacity,
                staging_reserve=self.staging_reserve,
                control_slots=self.control_slots,
                max_grant=max_grant,
                min_grant=self.grant.min_grant,
                max_keys=self.max_keys,
                retry_after_us=self.grant.retry_after_us,
                max_key_outstanding=self.max_key_outstanding,
                grant_chunk=self.grant.chunk,
            )
        except credit_errors.CreditError as exc:
            raise ConfigError(f"{_RC}: {exc}") from exc

    def gate_config(self) -> GateConfig:
        """The sender's :class:`tent_credit.GateConfig`; raises ConfigError if invalid."""
        try:
            return GateConfig(
                mode=self.credit_mode,
                legacy_window=self.legacy_window,
                required_fallback=self.required_fallback,
                max_routes=self.max_routes,
            )
        except credit_errors.CreditError as exc:
            raise ConfigError(f"{_RC}: {exc}") from exc


@attrs.frozen(kw_only=True)
class DispatchConfig:
    """The ``dispatch`` section: how the dispatch core cuts transfers and polls rails.

    ``slice_bytes`` (default 4 MiB): a transfer is cut into slices of at most this many bytes.
    ``poll_batch`` (default 64): the most completions one poll of one rail returns (the
    completion batch of a poll pass). Raises ConfigError for a value that is not an int ≥ 1.
    """

    slice_bytes: int = attrs.field(default=4 << 20, validator=_int(_DISPATCH, 1))
    poll_batch: int = attrs.field(default=64, validator=_int(_DISPATCH, 1, 1 << 20))


@attrs.frozen(kw_only=True)
class EngineConfig:
    """One engine's configuration. Raises ConfigError when receiver credit is enabled without
    ``enable_runtime_queue`` (rule 4) or a part is not of its type."""

    sched: SchedulingConfig = attrs.field(factory=SchedulingConfig)
    receiver_credit: ReceiverCreditConfig = attrs.field(factory=ReceiverCreditConfig)
    dispatch: DispatchConfig = attrs.field(factory=DispatchConfig)
    merge_requests: bool = False

    def __attrs_post_init__(self) -> None:
        for name, kind in (
            ("sched", SchedulingConfig),
            ("receiver_credit", ReceiverCreditConfig),
            ("dispatch", DispatchConfig),
        ):
            if not isinstance(getattr(self, name), kind):
                raise ConfigError(f"{name} must be a {kind.__name__}")
        if type(self.merge_requests) is not bool:
            raise ConfigError(f"merge_requests must be a bool, got {self.merge_requests!r}")
        if self.receiver_credit.enabled and not self.sched.enable_runtime_queue:
            # The reference's fail-closed opt-in: the gate sits at the queue's dispatch
            # eligibility, so credit without the queue would dispatch ungated.
            raise ConfigError(
                f"{_RC}/enabled requires enable_runtime_queue: receiver credit is checked at "
                "the admission queue's dispatch eligibility"
            )

    @property
    def enable_runtime_queue(self) -> bool:
        return self.sched.enable_runtime_queue


def _section(parent: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    value = parent.get(key, {})
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path} must be an object, got {type(value).__name__}")
    return value


def _known(section: Mapping[str, Any], cls: type, path: str, skip: frozenset[str]) -> None:
    names = {a.name for a in attrs.fields(cls)} - skip
    for key in section:
        if key not in names:
            raise ConfigError(f"unknown key {path}/{key}")


def load_engine_config(data: Mapping[str, Any] | str | bytes) -> EngineConfig:
    """Read an engine configuration (a mapping or JSON text); missing keys take defaults.

    Raises ConfigError on invalid JSON, a duplicate JSON key, a non-object section, an unknown
    key of a section this module owns, an invalid value, or receiver credit without the runtime
    queue. The message names the key's path. Nothing is returned half-built.
    """
    try:
        if isinstance(data, str | bytes):
            data = parse_config_json(data)
        if not isinstance(data, Mapping):
            raise ConfigError(f"configuration must be an object, got {type(data).__name__}")
        sched = load_config(data)
    except sched_errors.SchedError as exc:
        raise ConfigError(str(exc)) from exc

    credit_section = _section(data, _RC, _RC)
    _known(credit_section, ReceiverCreditConfig, _RC, frozenset())
    grant_section = _section(credit_section, "grant", _GRANT)
    _known(grant_section, GrantPolicyConfig, _GRANT, frozenset())
    dispatch_section = _section(data, _DISPATCH, _DISPATCH)
    _known(dispatch_section, DispatchConfig, _DISPATCH, frozenset())

    credit_kwargs = {k: v for k, v in credit_section.items() if k != "grant"}
    return EngineConfig(
        sched=sched,
        receiver_credit=ReceiverCreditConfig(
            **credit_kwargs, grant=GrantPolicyConfig(**grant_section)
        ),
        dispatch=DispatchConfig(**dispatch_section),
        merge_requests=data.get("merge_requests", False),
    )
