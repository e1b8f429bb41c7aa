"""Network-abuse benchmark (issue 27): a real receiver on loopback, an honest sender streaming,
and one attack at a time from another process; prints one JSON document.

Per attack it reports: whether the receiver refused it before decoding anything of it (for the
attacks of strangers: no control frame was exchanged with anyone but the honest sender), the
bytes written outside the region exposed to the honest sender (guard zones on both sides of
it), the honest throughput during the attack as a ratio of the idle baseline (``ratio``) and
of a *fair* baseline (``fair_ratio``: a process that burns the attacker's measured CPU without
sending, since on a small machine the attacker's own CPU slows everyone), whether a new honest
peer completed its handshake during the attack, how long it took and in how many attempts (it
retries on the engine's back-off, as a real peer does), and the receiver's RSS and descriptors
before and after (after: once they settle, at most ``SETTLE_S``).

The data-plane attacks (``DATA_ATTACKS``, told by ``net_abuse_lies.py``) are lies of
authenticated peers, each told by a peer of its own id and key (``LIES``, ``LIARS``): forged
data binds, writes outside a region, past credit, of a superseded session, with a bad CRC32C,
and a peer that never reads. Their rows
add each lie's outcome (``attacker.lies``: when the receiver answered, ``header`` meaning
before any payload byte was sent, and with what), ``refused_before_payload``, what the
receiver counted meanwhile (``counted``: its refusal, integrity and quarantine counters,
``quarantined_now``) and what it held towards the liars during the attack
(``backlog_during``). The liars' region lies between two more guards, and a segment exposed
to nobody is registered beside it: a byte changed there, or one not the honest sender's in its
region, counts in ``bytes_outside_grant``.

Loopback only; every attack is bounded in connections, frames and time (``--seconds``). The
receiver and the honest sender share this process (their own event-loop threads; ``Bench`` in
``net_abuse_bench.py``). Usage:
``python benchmarks/net_abuse.py [--seconds 2] [--attack NAME ...] [--repeat N] > out.json``
(the document goes to stdout; with ``--repeat N`` the campaign runs N times in a row, each
on a receiver and honest sender of its own, and ``summary`` holds each attack's medians).
``--spend`` measures instead what each attack makes the receiver's event loop spend (CPU
seconds per second, no honest stream beside it; :func:`spend`).
Timing figures need a quiet machine (``flock -x /work/.bench.lock`` on the shared one).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "transport" / "net"))

from attackers import (  # the tests' hostile peers
    RawControl,
    SilentFlood,
    client_proof,
)
from net_abuse_bench import (  # the receiver's side
    ATTACKERS,
    Bench,
    _fd_targets,
    _fds,
    _new_fds,
    _py_blocks,
    _rss_kb,
)
from net_abuse_lies import (  # the receiver's memory layout and the lies
    _FRAME_HEADER,
    _HELLO,
    BLOCK,
    DATA_ATTACKS,
    HONEST,
    _liars,
)
from procs import KEY
from tent_transport.control import FrameKind, encode_frame

from tent_credit import Heartbeat, SessionId, encode

SETTLE_S = 8.0  # > the 5 s deadlines: what an attack left behind must be gone by then
STRANGER_ATTACKS = (
    "no_credentials",
    "stalled_hellos",
    "unbound_data",
    "wrong_psk",
    "replayed_handshake",
    "garbage",
    "connection_burst",
)
ATTACKS = (
    *STRANGER_ATTACKS,
    "oversized_frame",
    "slowloris_after_auth",
    "control_flood",
    *DATA_ATTACKS,
)


# ------------------------------------------------------------------ the attacker's process


def _stranger(name: str, control: int, data: int, seconds: float, halt: Any) -> dict[str, Any]:
    end = time.monotonic() + seconds
    if name in ("no_credentials", "stalled_hellos", "unbound_data"):
        greeting = b""
        if name == "stalled_hellos":  # a well-formed hello of the honest peer's id, then nothing
            greeting = _HELLO.pack(b"TENT", 1, 1, HONEST, os.urandom(32))
        port = data if name == "unbound_data" else control
        flood = SilentFlood(
            port, keep=128, max_connections=50_000, duration_s=seconds, greeting=greeting
        )
        flood.start()
        while flood.is_alive() and not halt.is_set():  # bounded by the flood's duration
            flood.join(0.05)
        # halted before the receiver closed any (a loaded machine: its accepts lag the
        # flood): keep the door full and watch for the first close, as the flood's own
        # window does (its grace), instead of stopping blind
        grace_end = time.monotonic() + flood.grace_s
        while flood.is_alive() and not flood.closed_by_peer and time.monotonic() < grace_end:
            flood.join(0.05)
        flood.stop()
        return {"connections": flood.opened, "closed_by_receiver": flood.closed_by_peer}
    opened = closed = 0
    overheard = _overheard_handshake()
    while time.monotonic() < end and opened < 20_000 and not halt.is_set():  # bounded
        opened += 1
        try:
            if name == "wrong_psk":  # a known peer id, a proof made without its key
                raw = RawControl(control, claim=ATTACKERS[name], timeout_s=2.0)
                raw.hello()
                raw.prove(os.urandom(32))
                closed += raw.closed_by_peer(timeout_s=2.0)
                raw.close()
            elif name == "replayed_handshake":  # the honest peer's hello and proof, overheard
                raw = RawControl(control, claim=HONEST, timeout_s=2.0)
                raw.hello_c, proof = overheard
                raw.hello()
                raw.sock.sendall(proof)  # made for another listener hello: must be refused
                closed += raw.closed_by_peer(timeout_s=2.0)
                raw.close()
            else:
                with socket.create_connection(("127.0.0.1", control), timeout=2.0) as sock:
                    if name == "garbage":
                        sock.sendall(os.urandom(4096))
        except OSError:
            closed += 1
    return {"connections": opened, "closed_by_receiver": closed}


def _overheard_handshake() -> tuple[bytes, bytes]:
    """What an eavesdropper saw of one of the honest peer's handshakes: its hello and its proof
    (keyed over that connection's listener hello, which a replay cannot reproduce)."""
    hello_c = _HELLO.pack(b"TENT", 1, 1, HONEST, os.urandom(32))
    hello_s = _HELLO.pack(b"TENT", 1, 1, 2, os.urandom(32))
    return hello_c, client_proof(KEY, hello_c, hello_s)


def _authenticated(name: str, control: int, seconds: float, halt: Any) -> dict[str, Any]:
    end = time.monotonic() + seconds
    sent = 0
    closed = False
    try:
        raw = RawControl(control, claim=ATTACKERS[name], timeout_s=2.0)
    except OSError:
        return {"frames_sent": 0, "closed_by_receiver": True}
    try:
        raw.hello()
        raw.prove(KEY)
        if name == "oversized_frame":  # a length past every bound, before any payload
            raw.sock.sendall(_FRAME_HEADER.pack(1 << 30, int(FrameKind.CREDIT)))
            # the close comes at once; a short measurement window on a loaded machine still
            # waits up to 2 s for it (the transport stage saw it miss a 0.3 s window once)
            closed = raw.closed_by_peer(timeout_s=max(seconds, 2.0))
        elif name == "slowloris_after_auth":  # two bytes of a frame header, then nothing
            raw.sock.sendall(b"\x00\x00")
            while not closed and not halt.is_set() and time.monotonic() < end:  # bounded
                closed = raw.closed_by_peer(timeout_s=0.2)
        else:  # control_flood: heartbeats as fast as the receiver lets it send them
            beat = encode(Heartbeat(receiver_session_id=SessionId(1), epoch=1))
            chunk = encode_frame(FrameKind.CREDIT, beat) * 500
            raw.sock.settimeout(1.0)
            while time.monotonic() < end and sent < 50_000_000 and not halt.is_set():
                raw.sock.sendall(chunk)
                sent += 500
    except OSError:
        closed = True  # the receiver closed it (or its window stayed shut a whole second)
    raw.close()
    return {"frames_sent": sent, "closed_by_receiver": closed}


def _attack(name: str, target: dict[str, int], seconds: float, halt: Any, out: Any) -> None:
    """The attack ``name`` on ``target`` (its ports, and what a liar may aim at)."""
    control, data = target["control"], target["data"]
    if name in DATA_ATTACKS:
        _liars(name, target, seconds, halt, out)
        return
    out.send({"ready": True})  # imports done: the attack starts now
    cpu = time.process_time()
    if name in STRANGER_ATTACKS:
        result = _stranger(name, control, data, seconds, halt)
    else:
        result = _authenticated(name, control, seconds, halt)
    result["cpu_s"] = round(time.process_time() - cpu, 3)
    out.send(result)


# ------------------------------------------------------------------ the fair baseline's process


def _burn(cpu_s: float, seconds: float, halt: Any, out: Any) -> None:
    """Burn ``cpu_s`` seconds of CPU per ``seconds`` of wall time, spread evenly, until
    halted: the fair baseline, an attacker's CPU that sends nothing."""
    out.send({"ready": True})
    start = time.process_time()
    share = min(1.0, cpu_s / seconds) if seconds > 0 else 0.0
    end = time.monotonic() + 60.0  # bounded; stopped by ``halt``
    x = 0
    while time.monotonic() < end and not halt.is_set():
        tick = time.monotonic()
        while time.monotonic() - tick < 0.01 * share:
            x += 1
        time.sleep(0.01 * (1 - share))
    out.send({"cpu_s": round(time.process_time() - start, 3), "spins": x})


def _child(target: Any, *args: Any) -> tuple[Any, Any, Any]:
    """Start ``target(*args, halt, out)`` in a new process; returns once it is ready. ``out``
    is the write end of a one-way pipe: the receiver's process keeps only its read end, and
    :func:`_join` closes it, so nothing of the child is left among the receiver's fds."""
    ctx = multiprocessing.get_context("spawn")  # never fork a process running event loops
    out, into = ctx.Pipe(duplex=False)
    halt = ctx.Event()
    proc = ctx.Process(target=target, args=(*args, halt, into), daemon=True)
    proc.start()
    into.close()  # the child's end
    for _ in range(60):  # bounded: its imports take about a second
        if out.poll(1.0):
            with contextlib.suppress(EOFError):
                out.recv()  # ready: its imports done
                return proc, halt, out
            break  # it died before it was ready
        if not proc.is_alive():
            break
    proc.kill()
    proc.join(5)
    out.close()
    raise RuntimeError(f"{target.__name__}: the child process did not start")


def _join(proc: Any, halt: Any, out: Any, timeout: float) -> dict[str, Any]:
    halt.set()
    result: dict[str, Any] = {"error": "no result"}  # the child hung or died
    with contextlib.suppress(EOFError, OSError):
        if out.poll(timeout):
            result = out.recv()
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join(5)
    out.close()  # its pipe and the process's sentinel: not counted as the receiver's fds
    proc.close()
    return result


def _settle(fds: int) -> None:
    """Wait (at most ``SETTLE_S``) until the receiver's descriptors are back to ``fds``."""
    end = time.monotonic() + SETTLE_S
    while time.monotonic() < end and _fds() > fds:  # bounded
        time.sleep(0.1)


def run_attack(bench: Bench, name: str, seconds: float, baseline: float) -> dict[str, Any]:
    before = {"rss_kb": _rss_kb(), "py_blocks": _py_blocks(), "fds": _fds(), **bench.counters()}
    targets = _fd_targets()
    frames_before = bench.other_frames()
    honest_session = bench.rx._call(lambda: bench.rx.engine.control.session_of(HONEST))
    bench.expose_liars(name in DATA_ATTACKS)
    # the attack lasts until halted (at most 10 s past the measurement's planned end)
    target = {"control": bench.control_port, "data": bench.data_port, **bench.layout()}
    proc, halt, out = _child(_attack, name, target, seconds + 10)
    time.sleep(0.5)  # the attack builds up
    attack_start = time.monotonic()
    during = bench.stream(seconds)
    frames_during = bench.other_frames()  # before the newcomer's own session adds some
    backlog = bench.backlog() if name in DATA_ATTACKS else None
    newcomer_s, newcomer_attempts = bench.newcomer()  # the attack still runs
    attack_s = time.monotonic() - attack_start + 0.5
    attacker = _join(proc, halt, out, 30)
    bench.expose_liars(False)
    # the fair baseline: the attacker's CPU per second, burnt without sending
    cpu_rate = float(attacker.get("cpu_s", 0.0)) / attack_s
    burner, burn_halt, burn_out = _child(_burn, cpu_rate, 1.0)
    time.sleep(0.25)
    fair = bench.stream(seconds)
    burn = _join(burner, burn_halt, burn_out, 10)
    _settle(before["fds"])
    after = {"rss_kb": _rss_kb(), "py_blocks": _py_blocks(), "fds": _fds(), **bench.counters()}
    still = bench.rx._call(lambda: bench.rx.engine.control.session_of(HONEST))
    lies = attacker.get("lies", {})
    return {
        "attack": name,
        "refused_before_decode": (frames_during == frames_before)
        if name in STRANGER_ATTACKS
        else None,
        # a data-plane lie refused from its bind or header, before any payload byte was sent
        "refused_before_payload": bool(lies)
        and all(
            lie.get("when") in ("bind", "header")
            for lie in lies.values()
            if "when" in lie and not lie.get("admitted")
        )
        if name in _BEFORE_PAYLOAD
        else None,
        "lies_as_expected": bool(lies) and all(lie.get("as_expected") for lie in lies.values())
        if name in DATA_ATTACKS
        else None,
        "counted": {
            k: after[k] - before[k]
            for k in after
            if isinstance(after[k], int)
            and after[k] != before[k]
            and k not in ("rss_kb", "py_blocks", "fds")
        },
        "quarantined_now": sorted(set(after["quarantined"]) - set(before["quarantined"])),
        "backlog_during": backlog,
        "bytes_outside_grant": bench.outside(),
        "honest_mib_s": round(during, 1),
        "ratio": round(during / baseline, 3) if baseline else None,
        "fair_baseline_mib_s": round(fair, 1),
        "fair_ratio": round(during / fair, 3) if fair else None,
        "newcomer_handshake_s": newcomer_s,
        "newcomer_attempts": newcomer_attempts,
        "honest_session_kept": still is honest_session,
        "attacker": attacker,
        "burner_cpu_s": burn.get("cpu_s"),
        "before": before,
        "after": after,
        "fds_left": _new_fds(targets),
    }


# the attacks whose every lie must be refused before its payload is read (bad_crc's must be
# read to fail; never_reads is not refused, nor past_credit's never_negotiated, "admitted")
_BEFORE_PAYLOAD = ("forged_bind", "outside_region", "past_credit", "fenced_session")


def spend(bench: Bench, names: Sequence[str], seconds: float) -> dict[str, Any]:
    """What each attack makes the receiver spend: the CPU seconds its event-loop thread used
    per second while the attack ran, with no honest stream (so nothing else runs there), beside
    the idle figure and the honest stream's own (for scale). A per-thread CPU clock is far less
    noisy on a shared machine than a throughput ratio, and it is the attack's whole cost to the
    receiver: its share of the loop is what the honest peers lose."""

    def per_second(run: Callable[[], object]) -> float:
        cpu, start = bench.loop_cpu(), time.monotonic()
        run()
        return round((bench.loop_cpu() - cpu) / (time.monotonic() - start), 4)

    out: dict[str, Any] = {"idle": per_second(lambda: time.sleep(seconds))}
    for name in names:
        fds = _fds()
        bench.expose_liars(name in DATA_ATTACKS)
        target = {"control": bench.control_port, "data": bench.data_port, **bench.layout()}
        proc, halt, out_pipe = _child(_attack, name, target, seconds + 10)
        time.sleep(0.5)  # the attack builds up, as in run_attack
        spent = per_second(lambda: time.sleep(seconds))
        attacker = _join(proc, halt, out_pipe, 30)
        bench.expose_liars(False)
        out[name] = {"loop_cpu_per_s": spent, "attacker_cpu_s": attacker.get("cpu_s")}
        _settle(fds)  # what the attack left behind is gone before the next row
    mib_s: list[float] = []
    honest = per_second(lambda: mib_s.append(bench.stream(seconds)))
    out["honest_stream"] = {"loop_cpu_per_s": honest, "mib_s": round(mib_s[0], 1)}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement (0.2-30)")
    parser.add_argument("--attack", action="append", choices=ATTACKS, help="default: all")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="campaigns in a row, each on a fresh receiver (1-10); medians in 'summary'",
    )
    parser.add_argument(
        "--spend",
        action="store_true",
        help="instead of the campaign: the receiver loop's CPU per second of each attack",
    )
    parser.add_argument(
        "--no-trim-heap",
        action="store_true",
        help="the receiver keeps freed heap mapped (EngineOptions.trim_heap off): the RSS baseline",
    )
    args = parser.parse_args(argv)
    trim = not args.no_trim_heap
    if not 0.2 <= args.seconds <= 30:
        parser.error("--seconds must be within 0.2 and 30")
    if not 1 <= args.repeat <= 10:
        parser.error("--repeat must be within 1 and 10")
    names = args.attack or ATTACKS
    if args.spend:
        bench = Bench(trim_heap=trim)
        try:
            bench.stream(min(args.seconds, 1.0))  # warm up
            figures = spend(bench, names, args.seconds)
        finally:
            bench.close()
        doc = {"benchmark": "net_abuse_spend", "seconds": args.seconds, "spend": figures}
        print(json.dumps({**doc, "cpus": os.cpu_count(), "load": list(os.getloadavg())}, indent=2))
        return
    rows: list[dict[str, Any]] = []
    baselines: list[tuple[float, float]] = []
    rss: list[tuple[int, int]] = []  # per campaign: after its warm-up, after its last attack
    for repeat in range(args.repeat):
        # each campaign on a receiver of its own: a liar quarantined in one (as it must be)
        # could not tell its lie again to the same receiver
        bench = Bench(trim_heap=trim)
        try:
            bench.stream(min(args.seconds, 1.0))  # warm up
            baseline = bench.stream(args.seconds)
            first = _rss_kb()
            for name in names:
                rows.append({**run_attack(bench, name, args.seconds, baseline), "repeat": repeat})
            baselines.append((baseline, bench.stream(args.seconds)))
            rss.append((first, _rss_kb()))
        finally:
            bench.close()
    baseline, end = baselines[0]
    out = {
        "benchmark": "net_abuse",
        "seconds": args.seconds,
        "repeat": args.repeat,
        "trim_heap": trim,
        "block_bytes": BLOCK,
        "rss_kb_campaigns": rss,
        "baseline_mib_s": round(baseline, 1),
        "baseline_after_mib_s": round(end, 1),
        "baselines_mib_s": [[round(b, 1), round(e, 1)] for b, e in baselines],
        "attacks": rows,
        "summary": {name: summarize([r for r in rows if r["attack"] == name]) for name in names},
        "cpus": os.cpu_count(),
        "load": list(os.getloadavg()),
    }
    print(json.dumps(out, indent=2))


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One attack over its repeated runs: the medians of its two throughput ratios (a single
    5 s run decides neither to better than about 0.1 on a shared 2-core machine), and the
    worst of what must hold in every run."""
    fair = [r["fair_ratio"] for r in runs if r["fair_ratio"] is not None]
    idle = [r["ratio"] for r in runs if r["ratio"] is not None]
    newcomer = [r["newcomer_handshake_s"] for r in runs]
    return {
        "runs": len(runs),
        "fair_ratios": fair,
        "median_fair_ratio": statistics.median(fair) if fair else None,
        "ratios": idle,
        "median_ratio": statistics.median(idle) if idle else None,
        "bytes_outside_grant": max(r["bytes_outside_grant"] for r in runs),
        "slowest_newcomer_s": None if None in newcomer else max(newcomer),
        "honest_session_kept": all(r["honest_session_kept"] for r in runs),
        "fds_left": [r["fds_left"] for r in runs if r["fds_left"]],
        "rss_growth_kb": [r["after"]["rss_kb"] - r["before"]["rss_kb"] for r in runs],
    }


if __name__ == "__main__":
    main()
