"""Run one incast configuration (processes, the start barrier, the restart) and a matrix.

Every wait on a worker is bounded; every spawned process is reaped (killed if it outlives its
run). A soft verbs run gets a fabric folder of its own, removed with whatever a killed
receiver left in it. The matrix runner writes each record as one JSONL line as soon as its
run ends, so an interrupted matrix keeps what it measured. A matrix with netns runs makes
one namespace pair (``_netns``) for all of them, removed when the matrix ends however it ends.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, Any

import attrs

from ._config import Condition, Mode, RunConfig, tune_candidates
from ._netns import NetnsPair, netns_pair
from ._receiver import receiver_main
from ._records import build_record
from ._sender import sender_main

__all__ = ["RunFailed", "run_matrix", "run_one", "tune_window"]

_SPAWN = multiprocessing.get_context("spawn")


class RunFailed(RuntimeError):
    """A run could not be carried out (a worker died or did not answer in time)."""


class _Proc:
    def __init__(self, target: Callable[[Connection, dict[str, Any]], None], spec: dict[str, Any]):
        self.conn, child = _SPAWN.Pipe()
        self.process = _SPAWN.Process(target=target, args=(child, spec), daemon=True)
        self.process.start()
        child.close()

    def recv(self, timeout: float, waiting_for: str = "an answer") -> Any:
        if not self.conn.poll(timeout):
            if self.process.pid is not None and self.process.is_alive():
                with contextlib.suppress(OSError):
                    os.kill(self.process.pid, signal.SIGUSR1)  # its stacks, on stderr
                time.sleep(0.5)
            raise RunFailed(f"{self.process.name} sent nothing in {timeout:.0f} s ({waiting_for})")
        try:
            return self.conn.recv()
        except EOFError:
            raise RunFailed(f"{self.process.name} exited (code {self.process.exitcode})") from None

    def send(self, *message: Any) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(message)

    def stop(self) -> None:
        self.send("exit")
        self.process.join(10)
        self.kill()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)


def _stop_all(procs: Sequence[_Proc], grace_s: float = 10.0) -> None:
    """Ask every worker to exit at once, then reap them under one shared deadline."""
    for p in procs:
        p.send("exit")
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.process.join(max(0.0, deadline - time.monotonic()))
        p.kill()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spec(
    config: RunConfig, port: int, t0_ns: int, fabric: str = "", net: NetnsPair | None = None
) -> dict[str, Any]:
    """What every worker of the run gets: the config, the ports, and where each side lives
    (``netns_rx`` / ``netns_tx``: "" for the runner's own namespace)."""
    spec = config.as_dict()
    spec.update(
        control_port=port,
        t0_ns=t0_ns,
        sender_ids=list(range(1, config.senders + 1)),
        fabric=fabric,
        netns_rx="" if net is None else net.rx,
        netns_tx="" if net is None else net.tx,
        rx_address="127.0.0.1" if net is None else net.rx_address,
        tx_address="127.0.0.1" if net is None else net.tx_address,
    )
    return spec


def _shm_base() -> str | None:
    """Where run fabrics go: shared memory, as the soft device's own default."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else None


@contextlib.contextmanager
def _fabric(config: RunConfig) -> Iterator[str]:
    """The run's soft verbs fabric folder ("" on TCP), removed afterwards: a SIGKILLed
    receiver cannot remove its own node, and no run sees another's nodes."""
    if config.device != "softverbs":
        yield ""
        return
    folder = tempfile.mkdtemp(prefix="tent-incast-fabric-", dir=_shm_base())
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_one(config: RunConfig, *, net: NetnsPair | None = None) -> dict[str, Any]:
    """One run: a receiver, ``senders`` sender processes, its record. A netns run uses
    ``net`` (the matrix's pair), or makes a pair of its own when ``net`` is None. Raises
    RunFailed (the processes are reaped, a soft verbs run's fabric and a pair of the run's own
    are removed then too), or NetnsUnavailable / NetnsError when its own pair cannot be made."""
    if config.network == "netns" and net is None:
        with netns_pair() as own:
            return run_one(config, net=own)
    with _fabric(config) as fabric:
        return _run_one(config, fabric, net if config.network == "netns" else None)


def _run_one(config: RunConfig, fabric: str, net: NetnsPair | None) -> dict[str, Any]:
    # a fresh namespace has no listener of its own: a port free here is as good as any there
    port = _free_port()
    t0_ns = time.monotonic_ns()
    spec = _spec(config, port, t0_ns, fabric, net)
    receivers: list[dict[str, Any]] = []
    senders: list[_Proc] = []
    receiver = _Proc(receiver_main, spec)
    restarts = 0
    try:
        _expect(receiver.recv(60), "ready")
        senders = [_Proc(sender_main, dict(spec, peer_id=i)) for i in spec["sender_ids"]]
        for s in senders:
            _expect(s.recv(120), "ready")
        for s in senders:
            s.send("go")
        deadline = time.monotonic() + config.timeout_s
        if config.condition is Condition.RESTART:
            # kill once a third of the offered blocks landed (bounded by restart_after_s x 20)
            give_up = time.monotonic() + 20 * config.restart_after_s
            while time.monotonic() < give_up:
                receiver.send("count")
                if _expect(receiver.recv(30, "count"), "count")[1] >= config.offered // 3:
                    break
                time.sleep(0.01)
            receiver.send("drain", 0.0)  # its occupancy so far: the kill loses the process
            receivers.append(_expect(receiver.recv(30, "drain before the kill"), "drained")[1])
            receiver.kill()
            receivers[-1]["killed_ns"] = time.monotonic_ns()
            restarts += 1
            receiver = _Proc(receiver_main, spec)  # the same spec: the same namespace and port
            _expect(receiver.recv(60), "ready")
        reports = []
        for s in senders:
            left = max(1.0, deadline - time.monotonic())
            reports.append(_expect(s.recv(left, "sender done"), "done")[1])
        _stop_all(senders)  # gone: every unused grant they held must be reclaimed
        receiver.send("drain", 30.0 + config.release_delay_ms * config.offered / 1000.0, True)
        receivers.append(_expect(receiver.recv(90, "final drain"), "drained")[1])
    finally:
        _stop_all([*senders, receiver])
    return build_record(config, reports, receivers, restarts=restarts, t0_ns=t0_ns)


def _expect(message: Any, kind: str) -> Any:
    if not isinstance(message, tuple) or not message or message[0] != kind:
        raise RunFailed(f"expected {kind!r}, got {message!r:.200}")
    return message


def tune_window(
    base: RunConfig,
    *,
    on_run: Callable[[RunConfig, dict[str, Any]], None] | None = None,
    net: NetnsPair | None = None,
) -> tuple[int, list[dict[str, Any]]]:
    """Search the per-sender fixed window for the best throughput of ``base``'s (healthy) row,
    violations or not, so criterion 7 compares against the fastest fixed window: returns
    (window, records). ``net``: as :func:`run_one`'s."""
    records = []
    for candidate in tune_candidates(base):
        try:
            record = run_one(candidate, net=net)
        except RunFailed as exc:
            record = {"row": candidate.row, "mode": "fixed", "error": str(exc)}
            records.append(record)
            if on_run is not None:
                on_run(candidate, record)
            continue
        record["row"] = f"{base.row} tune"
        records.append(record)
        if on_run is not None:
            on_run(candidate, record)
    usable = [r for r in records if "error" not in r]
    if not usable:
        return base.window, records
    best = max(usable, key=lambda r: r["throughput_gbps"])
    return int(best["config"]["window"]), records


Progress = Callable[[int, int, RunConfig, dict[str, Any] | None], None]


def run_matrix(
    configs: Sequence[RunConfig],
    out: IO[str],
    *,
    progress: Progress | None = None,
    tune: RunConfig | None = None,
) -> list[dict[str, Any]]:
    """Run ``configs`` in order (with a window tuning first when ``tune`` is given: its best
    window then replaces the fixed window of every FIXED config of the same device, network,
    sender count and slot count); one JSONL line per run to ``out``. A run that fails is
    recorded with an ``error`` field so the verifier rejects the file rather than miss it.

    When any run is on the netns network, one namespace pair serves them all (made before
    the first run, removed after the last). Raises NetnsUnavailable / NetnsError, before any
    run, when it cannot be made."""
    wanted = [*configs, *([] if tune is None else [tune])]
    with contextlib.ExitStack() as stack:
        net = None
        if any(c.network == "netns" for c in wanted):
            net = stack.enter_context(netns_pair())
        return _run_matrix(configs, out, progress, tune, net)


def _run_matrix(
    configs: Sequence[RunConfig],
    out: IO[str],
    progress: Progress | None,
    tune: RunConfig | None,
    net: NetnsPair | None,
) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    total = len(configs)
    done = 0
    todo: Iterable[RunConfig] = configs
    if tune is not None:
        candidates = list(tune_candidates(tune))
        total += len(candidates)

        def tuned(config: RunConfig, record: dict[str, Any]) -> None:
            nonlocal done
            done += 1
            _write(out, record)
            records.append(record)
            if progress is not None:
                progress(done, total, config, record)

        window, _ = tune_window(tune, on_run=tuned, net=net)
        key = (tune.device, tune.network, tune.senders, tune.slots)
        todo = [
            attrs.evolve(c, window=window, depth=max(c.depth, window))
            if c.mode is Mode.FIXED and (c.device, c.network, c.senders, c.slots) == key
            else c
            for c in configs
        ]
    for config in todo:
        if progress is not None:
            progress(done, total, config, None)
        try:
            record = run_one(config, net=net)
        except RunFailed as exc:
            record = {"row": config.row, "mode": config.mode.value, "error": str(exc)}
        done += 1
        _write(out, record)
        records.append(record)
        if progress is not None:
            progress(done, total, config, record)
    return records


def _write(out: IO[str], record: dict[str, Any]) -> None:
    out.write(json.dumps(record, sort_keys=True) + "\n")
    out.flush()


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file (one JSON object per non-empty line)."""
    records = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            value = json.loads(line)
            if not isinstance(value, dict):
                raise ValueError(f"line {n}: not a JSON object")
            records.append(value)
    return records
