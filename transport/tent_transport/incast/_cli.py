"""``tent bench incast``, ``tent bench verify`` and ``tent bench report`` (issue 13).

The commands join the ``bench`` group of :mod:`tent_transport.bench` (see :mod:`..cli`).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import click
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from ..bench import congestion_option
from ._config import (
    DEVICES,
    MIB,
    NETWORKS,
    PATHS,
    Condition,
    Mode,
    RunConfig,
    default_matrix,
    full_matrix,
    interleave,
    rfc_matrix,
    smoke_matrix,
)
from ._hops import hops
from ._netns import NetnsError, check_available
from ._report import missing_plots, write_report
from ._runner import read_records, run_matrix
from ._verify import verify_records

__all__ = ["incast_command", "report_command", "verify_command"]


def _split(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def _devices(text: str) -> list[str]:
    devices = _split(text)
    bad = [d for d in devices if d not in DEVICES]
    if bad or not devices or len(set(devices)) != len(devices):
        raise click.BadParameter(f"devices are {', '.join(DEVICES)}, each once; got {text!r}")
    return devices


def _networks(text: str, devices: Sequence[str]) -> list[str]:
    networks = _split(text)
    bad = [n for n in networks if n not in NETWORKS]
    if bad or not networks or len(set(networks)) != len(networks):
        raise click.BadParameter(f"networks are {', '.join(NETWORKS)}, each once; got {text!r}")
    if "netns" in networks and "tcp" not in devices:
        raise click.BadParameter("the netns network runs the tcp device only")
    return networks


def _suffix(device: str, network: str) -> str:
    """A row's name after its rows' own: `` <device>`` off tcp, `` netns`` over netns."""
    return ("" if device == "tcp" else f" {device}") + (
        "" if network == "loopback" else f" {network}"
    )


def _custom(
    *,
    senders: str,
    modes: str,
    condition: str,
    batches: str,
    window: int,
    reps: int,
    path: str = "direct",
    devices: Sequence[str] = ("tcp",),
    networks: Sequence[str] = ("loopback",),
    **kw: Any,
) -> list[RunConfig]:
    try:
        counts = [int(s) for s in _split(senders)]
        batch_list = [0 if b == "adaptive" else int(b) for b in _split(batches)]
        if any(b < 0 for b in batch_list):
            raise ValueError(f"lease batches are 'adaptive' or ints >= 1, got {batches!r}")
        mode_list = [Mode(m) for m in _split(modes)]
        cond = Condition(condition)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if path != "direct":
        mode_list = [m for m in mode_list if m is Mode.CREDIT]  # staging is leased
        if not mode_list:
            raise click.BadParameter("the staged and mixed paths run in credit mode only")
        if any(d != "tcp" for d in devices):
            raise click.BadParameter("the staged and mixed paths run on the tcp device only")
    slowdown = cond is Condition.SLOWDOWN
    rows = []
    # a network is where tcp's sockets go: the soft verbs rows run once
    places = [(d, n) for d in devices for n in (networks if d == "tcp" else ("loopback",))]
    for (device, network), n, b in itertools.product(places, counts, batch_list):
        try:
            row = [
                RunConfig(
                    row=f"{n}-sender {cond.value}"
                    + ("" if path == "direct" else f" {path}")
                    + ((f" batch {b}" if b else " adaptive") if len(batch_list) > 1 else "")
                    + _suffix(device, network),
                    device=device,
                    network=network,
                    path=path,
                    mode=m,
                    senders=n,
                    condition=cond,
                    lease_batch=b,
                    window=window,
                    slots=kw["slots"] or (64 if slowdown else 8),
                    release_delay_ms=5.0
                    if slowdown
                    else (2.0 if cond is Condition.RESTART else 0.0),
                    block=kw["block"],
                    blocks_per_sender=kw["blocks"],
                    depth=max(kw["depth"], window),
                )
                for m in mode_list
            ]
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
        rows.append(row)
    return interleave(rows, reps)


class _Progress:
    """A rich bar on a TTY (runs done, current row, elapsed); one plain line per run otherwise."""

    def __init__(self, total: int) -> None:
        self.tty = sys.stderr.isatty()
        self.start = time.monotonic()
        self._bar: Any = None
        if self.tty:
            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                transient=False,
            )
            self._task = self._bar.add_task("incast", total=total)
            self._bar.start()

    def __call__(
        self, done: int, total: int, config: RunConfig, record: dict[str, Any] | None
    ) -> None:
        label = f"{config.row} [{config.mode.value}] rep {config.repetition}"
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=total, description=label)
            return
        if record is None:
            return
        elapsed = time.monotonic() - self.start
        if "error" in record:
            summary = f"ERROR {record['error']}"
        else:
            violations = f"violations {record['capacity_violations']}"
            if record.get("mode") != "credit":  # the comparison the matrix exists to show
                violations += " (over the nominal capacity: expected without credit)"
            summary = (
                f"{record['throughput_mib_s']:.0f} MiB/s"
                f" (consumed {record.get('consumed_mib_s', 0):.0f}) peak "
                f"{record['peak_occupancy'].get('request_slots')}"
                f"/{record['capacity']['request_slots']} {violations}"
                f" worst p99 {record['worst_sender_p99_us'] / 1000:.1f} ms"
                f" mean slots {record.get('mean_request_slots', 0):.1f}"
                f" cpu/block {record.get('sender_cpu_ms_per_block', 0):.2f}"
                f" + {record.get('receiver_cpu_ms_per_block', 0):.2f} ms"
            )
        click.echo(f"[{done}/{total} {elapsed:6.0f}s] {label}: {summary}", err=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


@click.command("incast")
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("incast.jsonl"),
    show_default=True,
    help="JSONL file, one record per run (appended).",
)
@click.option(
    "--repetitions",
    "-r",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Interleaved repetitions of every row.",
)
@click.option(
    "--full", is_flag=True, help="The whole product of senders x condition x lease batch x mode."
)
@click.option(
    "--smoke", is_flag=True, help="4 senders, one repetition per mode, 1 MiB blocks (CI)."
)
@click.option(
    "--rfc",
    is_flag=True,
    help="Criterion 7 only: the 1-, 4- and 16-sender rows and the slowdown, tuned fixed window "
    "against credit at its default (with --tune, the 16-sender window first).",
)
@click.option(
    "--tune/--no-tune",
    default=True,
    show_default=True,
    help="Search the 16-sender healthy fixed window first (default matrix).",
)
@click.option(
    "--scale",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Multiply the default per-run volume.",
)
@click.option(
    "--senders", default="", help="Custom rows: sender counts, e.g. 4,16 (instead of the matrix)."
)
@click.option(
    "--mode",
    "modes",
    default="disabled,fixed,credit",
    show_default=True,
    help="Custom rows: modes.",
)
@click.option(
    "--condition",
    type=click.Choice([c.value for c in Condition]),
    default="normal",
    show_default=True,
    help="Custom rows: the receiver's condition.",
)
@click.option(
    "--lease-batch",
    "batches",
    default="adaptive",
    show_default=True,
    help="Custom rows: credit's chunk, 'adaptive' (grant-ahead's fair share) or a static "
    "lease batch in blocks, e.g. adaptive,1,2,4,8.",
)
@click.option(
    "--window",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Custom rows: fixed per-sender window.",
)
@click.option(
    "--slots",
    type=click.IntRange(min=0),
    default=0,
    help="Custom rows: receiver capacity (0: 8, 64 for slowdown).",
)
@click.option(
    "--path",
    type=click.Choice(list(PATHS)),
    default="direct",
    show_default=True,
    help="Custom rows: where blocks land (staged, mixed: credit mode only).",
)
@click.option(
    "--device",
    "devices",
    default="tcp",
    show_default=True,
    help="Data devices, e.g. tcp,softverbs (softverbs: the direct path; in the default "
    "matrix the RFC's rows only).",
)
@click.option(
    "--network",
    "networks",
    default="loopback",
    show_default=True,
    help="Where the tcp rows' sockets go, e.g. loopback,netns (netns: the receiver and the "
    "senders in two network namespaces joined by a veth pair; needs root and ip netns; its "
    "rows are named '<row> netns').",
)
@click.option(
    "--block-mib",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Custom rows: block size in MiB.",
)
@click.option(
    "--blocks",
    type=click.IntRange(min=1),
    default=24,
    show_default=True,
    help="Custom rows: blocks per sender.",
)
@click.option(
    "--depth",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Custom rows: submits each sender keeps outstanding.",
)
@congestion_option(
    "The TCP data connections' congestion control, e.g. cubic (default: the system's; "
    "docs/incast.md)."
)
def incast_command(
    *,
    out: Path,
    repetitions: int,
    full: bool,
    smoke: bool,
    rfc: bool,
    tune: bool,
    scale: int,
    senders: str,
    modes: str,
    condition: str,
    batches: str,
    window: int,
    slots: int,
    path: str,
    devices: str,
    networks: str,
    block_mib: int,
    blocks: int,
    depth: int,
    congestion: str,
) -> None:
    """The RFC's incast matrix: N sender processes, one receiver, through the engine (TCP on
    loopback or across two network namespaces, or the soft verbs device)."""

    _check_selection(
        click.get_current_context(), senders=senders, full=full, smoke=smoke, rfc=rfc
    )
    _make_env_folders()
    tune_base = None
    device_list = _devices(devices)
    network_list = _networks(networks, device_list)
    if "netns" in network_list:
        _refuse_unless(check_available)
    if smoke:
        configs = [
            c
            for d in device_list
            for n in (network_list if d == "tcp" else ["loopback"])
            for c in smoke_matrix(device=d, network=n)
        ]
    elif senders:
        configs = _custom(
            senders=senders,
            modes=modes,
            condition=condition,
            batches=batches,
            window=window,
            reps=repetitions,
            slots=slots,
            path=path,
            devices=device_list,
            networks=network_list,
            block=block_mib * MIB,
            blocks=blocks,
            depth=depth,
        )
    elif rfc:
        configs = rfc_matrix(repetitions=repetitions, scale=scale)
        if tune:
            base = next(c for c in configs if c.row == "16-sender" and c.mode is Mode.FIXED)
            tune_base = attrs.evolve(base, repetition=0)
    elif full:
        configs = full_matrix(
            repetitions=repetitions, scale=scale, devices=device_list, networks=network_list
        )
    else:
        configs = default_matrix(
            repetitions=repetitions, scale=scale, devices=device_list, networks=network_list
        )
        if tune:  # on the first device's (over tcp: first network's) 16-sender healthy row
            first = device_list[0]
            row = "16-sender" + _suffix(first, network_list[0] if first == "tcp" else "loopback")
            base = next(c for c in configs if c.row == row and c.mode is Mode.FIXED)
            tune_base = attrs.evolve(base, repetition=0)
    if congestion:
        configs = [attrs.evolve(c, congestion=congestion) for c in configs]
        if tune_base is not None:
            tune_base = attrs.evolve(tune_base, congestion=congestion)
    progress = _Progress(len(configs))
    try:
        with out.open("a") as stream:
            records = _refuse_unless(
                lambda: run_matrix(configs, stream, progress=progress, tune=tune_base)
            )
    finally:
        progress.close()
    errors = sum("error" in r for r in records)
    click.echo(f"{len(records)} records appended to {out} ({errors} failed runs)")
    if errors:
        sys.exit(1)


_CUSTOM_ONLY = (
    "modes",
    "condition",
    "batches",
    "window",
    "slots",
    "path",
    "block_mib",
    "blocks",
    "depth",
)


def _make_env_folders() -> None:
    """Make the folders ``TENT_INCAST_TRACE`` and ``TENT_INCAST_PROFILE`` name, before any
    process is spawned (a missing one made every worker die with only an exit code)."""
    for variable in ("TENT_INCAST_TRACE", "TENT_INCAST_PROFILE"):
        folder = os.environ.get(variable)
        if not folder:
            continue
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise click.ClickException(f"{variable}={folder}: cannot make it ({exc})") from exc


def _check_selection(
    ctx: click.Context, *, senders: str, full: bool, smoke: bool, rfc: bool = False
) -> None:
    """One selection (``--smoke``, ``--full``, ``--rfc``, ``--senders`` or the default matrix),
    and the custom-row options only with ``--senders``: given elsewhere they would be
    ignored."""
    chosen = [
        name
        for name, on in (
            ("--smoke", smoke),
            ("--full", full),
            ("--rfc", rfc),
            ("--senders", senders),
        )
        if on
    ]
    if len(chosen) > 1:
        raise click.UsageError(f"{' and '.join(chosen)} select different matrices: give one")
    if senders:
        return
    given = [
        name
        for name in _CUSTOM_ONLY
        if ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)
    ]
    if given:
        flags = ", ".join(
            next(o for o in p.opts if o.startswith("--"))
            for p in ctx.command.params
            if p.name in given
        )
        raise click.UsageError(f"{flags}: custom-row options, used only with --senders")


_T = TypeVar("_T")


def _refuse_unless(call: Callable[[], _T]) -> _T:
    """``call()``; a namespace that cannot be made or entered exits 2 with its message."""
    try:
        return call()
    except NetnsError as exc:
        click.echo(f"Error: the netns network: {exc}", err=True)
        sys.exit(2)


@click.command("verify")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def verify_command(file: Path) -> None:
    """Check an incast JSONL file against the acceptance rules; exit 1 on any failure."""

    try:
        records = read_records(file)
    except ValueError as exc:
        click.echo(f"FAIL: {file}: {exc}")
        sys.exit(1)
    failures = verify_records(records)
    for failure in failures:
        click.echo(f"FAIL: {failure}")
    reported = sum(
        r.get("capacity_violations", 0) for r in records if r.get("mode") in ("disabled", "fixed")
    )
    click.echo(
        f"{len(records)} records, {len(failures)} failures; capacity violations reported "
        f"(not failed) in disabled/fixed modes: {reported}"
    )
    if failures:
        sys.exit(1)


@click.command("report")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder for table.md, summary.json and the plots.",
)
def report_command(file: Path, out: Path) -> None:
    """Medians over repetitions beside the RFC's numbers, and the plots, into a folder."""

    paths = write_report(read_records(file), out)
    for path in paths:
        click.echo(str(path))
    for skipped in missing_plots(paths):
        click.echo(f"not drawn: {skipped}", err=True)


@click.command("hops")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
def hops_command(folder: Path) -> None:
    """Print the credit hop latencies and message counts of a run traced with
    TENT_INCAST_TRACE=FOLDER (JSON; docs/incast.md)."""
    result = hops(folder)
    if not result["messages"]["blocks_landed"]:
        raise click.ClickException(f"{folder}: no traced landing (was TENT_INCAST_TRACE set?)")
    click.echo(json.dumps(result, indent=1))
