"""What one incast run is (:class:`RunConfig`) and which runs a matrix holds.

A run is N sender processes writing fixed-size KV blocks into one receiver process through the
real engine, over TCP on loopback or over the soft verbs device (:data:`DEVICES`). The
receiver's *nominal* capacity is ``slots`` blocks; its physical pool holds every sender's
whole pipeline (``senders * depth`` blocks), so disabled and fixed modes can exceed the
nominal capacity without corrupting data: that excess is what they are measured on. Only
credit mode is held to the nominal capacity (docs/transport_design.md#incast-matrix).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterator, Sequence

import attrs

from ..devices._congestion import check_congestion

__all__ = [
    "DEVICES",
    "NETWORKS",
    "Condition",
    "Mode",
    "RunConfig",
    "default_matrix",
    "full_matrix",
    "interleave",
    "rfc_matrix",
    "smoke_matrix",
    "tune_candidates",
]

MIB = 1 << 20
PATHS = ("direct", "staged", "mixed")
"""direct: every block lands in its target; staged: every block lands in the receiver's
staging pool and is moved by an inner transfer; mixed: odd sequence numbers staged."""
DEVICES = ("tcp", "softverbs")
"""tcp: the engine's TCP rails on loopback; softverbs: the soft RC device (one-sided writes
into a shared-memory fabric private to the run, admission at the write notice)."""
NETWORKS = ("loopback", "netns")
"""Where a tcp run's sockets go. loopback: every process on 127.0.0.1; netns: the receiver in
one network namespace, the senders in another, joined by a veth pair (distinct addresses,
a real link's device queues; needs root, see ``_netns``)."""


class Mode(enum.Enum):
    DISABLED = "disabled"
    """No window and no credit: each sender's pipeline depth is its only bound."""
    FIXED = "fixed"
    """A per-sender local window (the gate's legacy window), no receiver credit."""
    CREDIT = "credit"
    """Receiver-advertised credit: grant-ahead at its adaptive default, or a static lease of
    ``lease_batch`` blocks per sender."""


class Condition(enum.Enum):
    NORMAL = "normal"
    SLOWDOWN = "slowdown"
    """The receiver's consumer takes ``release_delay_ms`` per block before it releases it."""
    RESTART = "restart"
    """The receiver process is killed (SIGKILL) mid-run and started again on the same port."""


def _positive(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{attr.name} must be a positive int, got {value!r}")


def _non_negative(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 0:
        raise ValueError(f"{attr.name} must be an int >= 0, got {value!r}")


@attrs.frozen(kw_only=True)
class RunConfig:
    """One run of the matrix (a row's one repetition). Raises ValueError on a bad field."""

    row: str
    mode: Mode
    senders: int = attrs.field(validator=_positive)
    condition: Condition = Condition.NORMAL
    slots: int = attrs.field(default=8, validator=_positive)
    block: int = attrs.field(default=4 * MIB, validator=_positive)
    blocks_per_sender: int = attrs.field(default=24, validator=_positive)
    depth: int = attrs.field(default=4, validator=_positive)
    """Transfers each sender keeps submitted (its application pipeline)."""
    window: int = attrs.field(default=2, validator=_positive)
    """Fixed mode: the per-sender local window."""
    lease_batch: int = attrs.field(default=0, validator=_non_negative)
    """Credit mode: 0 (the default) is grant-ahead's adaptive chunk, each sender's fair share of
    the slots; N is the RFC's static lease batch, N blocks of standing credit per sender."""
    release_delay_ms: float = 0.0
    restart_after_s: float = 1.0
    """Restart: the receiver is killed once a third of the offered blocks landed (at the
    latest after 20 x this)."""
    repetition: int = 0
    path: str = "direct"
    """One of :data:`PATHS` (staged and mixed: credit mode only)."""
    device: str = "tcp"
    """One of :data:`DEVICES` (softverbs: the direct path only)."""
    network: str = "loopback"
    """One of :data:`NETWORKS` (netns: the tcp device only)."""
    congestion: str = ""
    """The TCP data connections' congestion control (``""``: the system's; docs/incast.md
    "incast-congestion")."""
    timeout_s: float = 120.0

    def __attrs_post_init__(self) -> None:
        check_congestion(self.congestion or None)
        if self.path not in PATHS:
            raise ValueError(f"path must be one of {PATHS}, got {self.path!r}")
        if self.path != "direct" and self.mode is not Mode.CREDIT:
            # a staged write is leased (its STAGING_SLOTS): without credit there is no staging
            raise ValueError("the staged and mixed paths need credit mode")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {self.device!r}")
        if self.device != "tcp" and self.path != "direct":
            # a one-sided write has no receiver code between landing and its target
            raise ValueError("the staged and mixed paths need the tcp device")
        if self.network not in NETWORKS:
            raise ValueError(f"network must be one of {NETWORKS}, got {self.network!r}")
        if self.network != "loopback" and self.device != "tcp":
            # a soft verbs fabric is shared memory: it has no network to put in a namespace
            raise ValueError("the netns network needs the tcp device")
        if self.release_delay_ms < 0 or self.restart_after_s <= 0 or self.timeout_s <= 0:
            raise ValueError("delays and timeouts must be positive")

    @property
    def offered(self) -> int:
        return self.senders * self.blocks_per_sender

    def as_dict(self) -> dict[str, object]:
        out = attrs.asdict(self)
        out["mode"] = self.mode.value
        out["condition"] = self.condition.value
        return out


def _healthy(row: str, senders: int, mode: Mode, **kw: object) -> RunConfig:
    return RunConfig(row=row, mode=mode, senders=senders, **kw)  # type: ignore[arg-type]


ROW_BLOCKS = 800
"""Blocks one healthy row moves (3.2 GiB of 4 MiB blocks): at this machine's 0.9-1.3 GiB/s that
is 2.5-3.5 s, so the steady window (the middle 80 % of completions) lasts over 2 s and setup
and the first grants weigh little on either mode."""


def _rows(modes: Sequence[Mode], scale: int) -> list[list[RunConfig]]:
    """The RFC's rows (docs/transport_design.md), each a list of per-mode configs."""
    b = 24 * scale
    rows: list[list[RunConfig]] = []
    for n in (1, 4, 16):
        per = ROW_BLOCKS * scale // n
        rows.append([_healthy(f"{n}-sender", n, m, blocks_per_sender=per) for m in modes])
    rows.append(
        [
            RunConfig(
                row="16-sender slowdown",
                mode=m,
                senders=16,
                condition=Condition.SLOWDOWN,
                slots=64,
                depth=8,
                window=8,
                release_delay_ms=5.0,
                # the consumer releases 200 blocks/s: 40 each is 3.2 s
                blocks_per_sender=40 * scale,
            )
            for m in modes
        ]
    )
    rows.append(
        [
            RunConfig(
                row="4-sender restart",
                mode=m,
                senders=4,
                condition=Condition.RESTART,
                blocks_per_sender=b,
                release_delay_ms=2.0,
                restart_after_s=1.0,
            )
            for m in modes
        ]
    )
    return rows


def rfc_matrix(*, repetitions: int = 5, scale: int = 1) -> list[RunConfig]:
    """The RFC's criterion-7 comparison, and nothing else: the 1-, 4- and 16-sender healthy rows
    and the 16-sender consumer slowdown, tuned fixed window against receiver credit at its
    default, interleaved (raises ValueError as :func:`interleave`)."""
    rows = [row for row in _rows((Mode.FIXED, Mode.CREDIT), scale) if "restart" not in row[0].row]
    return interleave(rows, repetitions)


def _distinct(values: Sequence[str], allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    out = tuple(values)
    if not out or len(set(out)) != len(out) or any(v not in allowed for v in out):
        raise ValueError(f"{what} must be distinct ones of {allowed}, got {values!r}")
    return out


def _devices(devices: Sequence[str]) -> tuple[str, ...]:
    return _distinct(devices, DEVICES, "devices")


def _networks(networks: Sequence[str], devices: Sequence[str]) -> tuple[str, ...]:
    out = _distinct(networks, NETWORKS, "networks")
    if "netns" in out and "tcp" not in devices:
        raise ValueError("the netns network needs the tcp device")
    return out


def _on(
    device: str, rows: list[list[RunConfig]], network: str = "loopback"
) -> list[list[RunConfig]]:
    """``rows`` on ``device`` over ``network``; a row of another device than tcp is named
    ``<row> <device>``, one over the netns network ``<row> netns`` (the report groups by row
    name)."""
    suffix = ("" if device == "tcp" else f" {device}") + (
        "" if network == "loopback" else f" {network}"
    )
    if not suffix:
        return rows
    return [
        [attrs.evolve(c, device=device, network=network, row=f"{c.row}{suffix}") for c in row]
        for row in rows
    ]


def default_matrix(
    *,
    repetitions: int = 3,
    scale: int = 1,
    devices: Sequence[str] = ("tcp",),
    networks: Sequence[str] = ("loopback",),
) -> list[RunConfig]:
    """On tcp: the RFC's rows in every mode, the staged and mixed paths (4 senders, credit),
    and the lease-batch sweep on the 16-sender healthy row, once per network of ``networks``.
    On softverbs: the RFC's rows only (a one-sided write cannot be staged; the sweep is a tcp
    question), once (a fabric has no network). Raises ValueError for an unknown or repeated
    device or network, or the netns network without the tcp device.

    Repetitions interleave the modes (:func:`interleave`) so that every mode sees the same
    machine load. The fixed-window tuning (``--tune``) is separate: :func:`tune_candidates`.
    """
    modes = (Mode.DISABLED, Mode.FIXED, Mode.CREDIT)
    rows: list[list[RunConfig]] = []
    nets = _networks(networks, _devices(devices))
    for device in _devices(devices):
        if device == "tcp":
            for network in nets:
                rows += _on(device, _tcp_rows(modes, scale), network)
        else:
            rows += _on(device, _rows(modes, scale))
    return interleave(rows, repetitions)


def _tcp_rows(modes: Sequence[Mode], scale: int) -> list[list[RunConfig]]:
    rows = _rows(modes, scale)
    # the staged and mixed paths beside the 4-sender direct credit row (staging is leased:
    # credit mode only)
    rows.append(
        [
            RunConfig(
                row=f"4-sender {path}",
                mode=Mode.CREDIT,
                senders=4,
                path=path,
                blocks_per_sender=24 * scale,
            )
            for path in ("staged", "mixed")
        ]
    )
    per = ROW_BLOCKS * scale // 16
    rows.append(
        [
            RunConfig(
                row=f"16-sender batch {b}",
                mode=Mode.CREDIT,
                senders=16,
                lease_batch=b,
                blocks_per_sender=per,
            )
            for b in (1, 2, 4, 8)
        ]
    )
    return rows


def full_matrix(
    *,
    repetitions: int = 3,
    scale: int = 1,
    devices: Sequence[str] = ("tcp",),
    networks: Sequence[str] = ("loopback",),
) -> list[RunConfig]:
    """Every device (tcp: on every network) x sender count x mode x condition x lease batch
    (the direct path). Raises ValueError as :func:`default_matrix` does."""
    rows: list[list[RunConfig]] = []
    nets = _networks(networks, _devices(devices))
    for device in _devices(devices):
        for network in nets if device == "tcp" else ("loopback",):
            rows += _on(device, _full_rows(scale), network)
    return interleave(rows, repetitions)


def _full_rows(scale: int) -> list[list[RunConfig]]:
    rows: list[list[RunConfig]] = []
    for n, condition, batch in itertools.product((1, 4, 16), Condition, (1, 2, 4, 8)):
        slots = 64 if condition is Condition.SLOWDOWN else 8
        delay = (
            5.0
            if condition is Condition.SLOWDOWN
            else (2.0 if condition is Condition.RESTART else 0.0)
        )
        rows.append(
            [
                RunConfig(
                    row=f"{n}-sender {condition.value} batch {batch}",
                    mode=m,
                    senders=n,
                    condition=condition,
                    slots=slots,
                    lease_batch=batch,
                    release_delay_ms=delay,
                    blocks_per_sender=max(8, 24 * scale // max(1, n // 4)),
                )
                for m in Mode
            ]
        )
    return rows


def smoke_matrix(
    *,
    block: int = MIB,
    blocks_per_sender: int = 8,
    device: str = "tcp",
    network: str = "loopback",
) -> list[RunConfig]:
    """The CI smoke: 4 senders, one repetition of each mode, small blocks, on ``device`` over
    ``network`` (its row is ``4-sender smoke``, ``4-sender smoke <device>`` off tcp,
    ``4-sender smoke netns`` over netns). Raises ValueError for an unknown device or network,
    or netns off tcp."""
    row = [
        RunConfig(
            row="4-sender smoke",
            mode=m,
            senders=4,
            block=block,
            blocks_per_sender=blocks_per_sender,
            timeout_s=60.0,
        )
        for m in Mode
    ]
    net = _networks([network], _devices([device]))[0]
    return _on(device, [row], net)[0]


def interleave(rows: Sequence[Sequence[RunConfig]], repetitions: int) -> list[RunConfig]:
    """Repetition-major order: rep 0 of every row's every mode, then rep 1, ...; within a
    row the modes run in its order on even repetitions and reversed on odd ones, so no mode
    always runs first (after a quiet spell) or last."""
    if repetitions < 1:
        raise ValueError("repetitions must be >= 1")
    return [
        attrs.evolve(config, repetition=rep)
        for rep in range(repetitions)
        for row in rows
        for config in (row if rep % 2 == 0 else row[::-1])
    ]


def tune_candidates(base: RunConfig) -> Iterator[RunConfig]:
    """Per-sender fixed windows from 1 up to capacity (and up to 4 x capacity / senders where
    that is larger, issue 13), doubling: 1, 2, 4, ... (each a whole N-process run here)."""
    top = max(base.slots, 4 * base.slots // base.senders)
    window = 1
    while window <= top:
        yield attrs.evolve(
            base,
            row=f"{base.row} tune",
            mode=Mode.FIXED,
            window=window,
            depth=max(base.depth, window),
        )
        window *= 2
