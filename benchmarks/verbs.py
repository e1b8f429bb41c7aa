"""Benchmark of the verbs path on the soft device; prints one JSON object on stdout.

Each measurement stands beside a baseline measured in the same run (compare ratios, not times):

1. ``one_sided_write``: soft-verbs RDMA WRITE throughput between two processes (4 MiB slices,
   chained posts, the target process never runs) against a bare shared-memory copy of the same
   bytes into a ``multiprocessing.shared_memory`` block of the target. Goal: ratio ≥ 0.8.
   Repetitions alternate baseline and soft; the figure is the median of the pair ratios.
2. ``posting_cost``: the time per slice of ``VerbsDevice.post`` (chained posts of 1 / 16 / 256
   WRs, step mode so nothing executes meanwhile) against a raw soft ``QP.post_send`` of a
   prebuilt chain of the same depth: what the Device's Python costs per WR.
3. ``transmit_meter``: the dispatch core over a VerbsDevice on a soft port paced at a
   configured rate, at QP depth 1 / 16 / 256: the transmit meter's estimate (bytes over busy
   time) and the selection EWMA (per-slice post → completion samples), each over the rate.

Usage: ``python benchmarks/verbs.py [--quick]``; ``--quick`` is a smoke run of a few seconds.
"""

from __future__ import annotations

import ctypes
import json
import multiprocessing
import platform
import sys
import tempfile
import threading
import time
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import click
from tent_transport.config import load_engine_config
from tent_transport.devices import Opcode, SliceRequest
from tent_transport.devices.verbs import VerbsDevice, VerbsDeviceConfig, soft, soft_backend
from tent_transport.dispatch import DispatchCore, TransferRequest

MIB = 1 << 20
e = soft.enums
ALL = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


_BASE: list[str] = []  # the run's directory under /dev/shm, removed when the run ends


def _fabric() -> Path:
    """A fresh soft fabric for one measurement, inside the run's directory."""
    return Path(tempfile.mkdtemp(dir=_BASE[0]))


# -- 1. one-sided write across processes ----------------------------------------------------


def _rc_side(backend: Any, depth: int) -> tuple[Any, Any, Any, Any]:
    ctx = backend.open_context("soft0")
    pd = soft.PD(ctx)
    cq = soft.CQ(ctx, 4 * depth)
    cap = soft.QPCap(max_send_wr=2 * depth, max_recv_wr=1)
    init = soft.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)
    attr = soft.QPAttr()
    attr.qp_access_flags = ALL
    return ctx, pd, cq, soft.QP(pd, init, attr)


def _rts(qp: Any, gid: str, qpn: int) -> None:
    attr = soft.QPAttr()
    attr.ah_attr = soft.AHAttr(is_global=1, gr=soft.GlobalRoute(dgid=soft.GID(gid)))
    attr.dest_qp_num = qpn
    attr.rnr_retry = 7
    qp.to_rts(attr)


def _target(conn: Any, fabric: str, region: int) -> None:
    """The target process: one soft MR and one shared-memory block, then it only waits."""
    ctx, pd, _, qp = _rc_side(soft_backend(Path(fabric)), 8)
    mr = soft.MR(pd, region, ALL)
    block = shared_memory.SharedMemory(create=True, size=region)
    conn.send((ctx.query_gid(1, 0).gid, qp.qp_num, mr.rkey, mr.buf, block.name))
    gid, qpn = conn.recv()
    _rts(qp, gid, qpn)
    conn.send("ready")
    conn.recv()  # "exit": nothing of ours runs while the initiator writes
    block.close()
    block.unlink()
    ctx.close()


def one_sided_write(quick: bool) -> dict[str, Any]:
    slice_bytes, depth = 4 * MIB, 16
    region = (16 if quick else 64) * MIB
    total = (128 if quick else 512) * MIB
    reps = 5 if quick else 9
    fabric = str(_fabric())
    spawn = multiprocessing.get_context("spawn")
    parent, child = spawn.Pipe()
    proc = spawn.Process(target=_target, args=(child, fabric, region), daemon=True)
    proc.start()
    ctx, pd, cq, qp = _rc_side(soft_backend(Path(fabric)), depth)
    try:
        gid, qpn, rkey, raddr, block_name = parent.recv()
        parent.send((ctx.query_gid(1, 0).gid, qp.qp_num))
        _rts(qp, gid, qpn)
        assert parent.recv() == "ready"
        src = soft.MR(pd, slice_bytes, e.IBV_ACCESS_LOCAL_WRITE)
        src.write(bytes(range(256)) * (slice_bytes // 256), slice_bytes)
        block = shared_memory.SharedMemory(name=block_name)
        anchor = ctypes.c_char.from_buffer(block.buf)
        block_addr = ctypes.addressof(anchor)
        slices = total // slice_bytes
        per_region = region // slice_bytes

        ready = threading.Event()
        cq.set_notify(ready.set)  # wait for completions as the engine does, never spin

        def soft_run() -> float:
            start = time.perf_counter()
            posted = completed = 0
            while completed < slices:
                ready.clear()
                cq.req_notify()  # one-shot, armed before polling
                while posted < slices and posted - completed < depth:
                    wr = soft.SendWR(
                        wr_id=posted,
                        opcode=e.IBV_WR_RDMA_WRITE,
                        num_sge=1,
                        sg=[soft.SGE(src.buf, slice_bytes, src.lkey)],
                    )
                    wr.set_wr_rdma(rkey, raddr + (posted % per_region) * slice_bytes)
                    qp.post_send(wr)
                    posted += 1
                n, wcs = cq.poll(depth)
                assert all(w.status == e.IBV_WC_SUCCESS for w in wcs)
                completed += n
                if not n:
                    ready.wait(0.01)
            return total / (time.perf_counter() - start)

        def bare_run() -> float:
            start = time.perf_counter()
            for i in range(slices):
                ctypes.memmove(block_addr + (i % per_region) * slice_bytes, src.buf, slice_bytes)
            return total / (time.perf_counter() - start)

        bare_run(), soft_run()  # warm-up: first touch of both targets' pages
        pairs = [(bare_run(), soft_run()) for _ in range(reps)]
        del anchor
        block.close()
        parent.send("exit")
        proc.join(10)
    finally:
        if proc.is_alive():
            proc.kill()
        ctx.close()
    # adjacent runs see the same machine load: the median of the pair ratios is the figure
    ratios = sorted(soft_bps / bare_bps for bare_bps, soft_bps in pairs)
    return {
        "slice_bytes": slice_bytes,
        "bytes_per_repetition": total,
        "repetitions": reps,
        "chain_depth": depth,
        "soft_write_best_bytes_per_s": max(s for _, s in pairs),
        "bare_shm_copy_best_bytes_per_s": max(b for b, _ in pairs),
        "pair_ratios": ratios,
        "ratio_to_baseline": ratios[len(ratios) // 2],
        "goal_ratio": 0.8,
    }


# -- 2. posting cost per slice ----------------------------------------------------------------


def _device_pair(fabric: Path, config: soft.SoftConfig, **kw: Any) -> tuple[VerbsDevice, ...]:
    backend = soft_backend(fabric, config)
    tx = VerbsDevice(backend, VerbsDeviceConfig(device_name="soft0", **kw), name="tx")
    rx = VerbsDevice(backend, VerbsDeviceConfig(device_name="soft0", **kw), name="rx")
    tx_end, rx_end = tx.endpoint(2), rx.endpoint(1)
    tx.connect(2, rx_end)
    rx.connect(1, tx_end)
    return tx, rx


def posting_cost(quick: bool) -> list[dict[str, Any]]:
    fabric = _fabric()
    tx, rx = _device_pair(
        fabric, soft.SoftConfig(step_mode=True), cq_depth=4096, max_send_wr=256, max_recv_wr=256
    )
    segment = rx.allocate(MIB)
    tx.add_region(2, rx.exposures.expose(1, 1, 1, segment, offset=0, length=MIB))
    local = memoryview(bytearray(MIB))
    tx.register_local(local)
    slices_per_depth = 2048 if quick else 16384
    out = []
    try:
        for depth in (1, 16, 256):
            rounds = max(1, slices_per_depth // depth)
            device_s = raw_s = 0.0
            for r in range(rounds):
                batch = [
                    SliceRequest(
                        wr_id=r * depth + i,
                        opcode=Opcode.WRITE,
                        peer=2,
                        local=local[i * 64 : (i + 1) * 64],
                        remote_segment=1,
                        remote_offset=i * 64,
                        length=64,
                        write_id=i,
                    )
                    for i in range(depth)
                ]
                start = time.perf_counter()
                tx.post(batch, 0)
                device_s += time.perf_counter() - start
                while tx.context.release():
                    pass
                while tx.poll(256, 0):
                    pass
                rx.poll_arrivals(256)
            # the raw baseline: soft post_send of a prebuilt chain on a bare QP pair
            ctx, pd, cq, qp = _rc_side(soft_backend(fabric, soft.SoftConfig(step_mode=True)), 256)
            ctx2, pd2, _, qp2 = _rc_side(soft_backend(fabric), 256)
            _rts(qp, ctx2.query_gid(1, 0).gid, qp2.qp_num)
            _rts(qp2, ctx.query_gid(1, 0).gid, qp.qp_num)
            src = soft.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
            dst = soft.MR(pd2, 4096, ALL)
            for _ in range(rounds):
                head = None
                for i in reversed(range(depth)):
                    wr = soft.SendWR(
                        wr_id=i,
                        opcode=e.IBV_WR_RDMA_WRITE,
                        num_sge=1,
                        sg=[soft.SGE(src.buf, 8, src.lkey)],
                        next_wr=head,
                    )
                    wr.set_wr_rdma(dst.rkey, dst.buf)
                    head = wr
                start = time.perf_counter()
                qp.post_send(head)
                raw_s += time.perf_counter() - start
                while ctx.release():
                    pass
                while cq.poll(256)[0]:
                    pass
            ctx.close()
            ctx2.close()
            n = rounds * depth
            out.append(
                {
                    "depth": depth,
                    "slices": n,
                    "device_us_per_slice": device_s / n * 1e6,
                    "raw_post_send_us_per_slice": raw_s / n * 1e6,
                    "ratio_to_baseline": device_s / raw_s,
                }
            )
    finally:
        tx.close()
        rx.close()
    return out


# -- 3. the transmit meter against the configured rate ---------------------------------------


def transmit_meter(quick: bool) -> list[dict[str, Any]]:
    rate = 200e6  # bytes/s of the soft port; the meters start from a 4 Gb/s link's seed,
    seed_gbps = 4.0  # so their clamp [0.1x, 10x] = [50 MB/s, 5 GB/s] holds every sample here
    slice_bytes = 256 * 1024
    transfers, transfer_bytes = (8, 2 * MIB) if quick else (16, 8 * MIB)
    config = load_engine_config(
        {
            "dispatch": {"slice_bytes": slice_bytes},
            "transports": {"rdma": {"min_bandwidth_gbps": 1.0}},
        }
    )
    out = []
    for depth in (1, 16, 256):
        fabric = _fabric()
        tx, rx = _device_pair(
            fabric,
            soft.SoftConfig(rate_bytes_per_s=rate),
            cq_depth=max(64, 2 * depth),
            max_send_wr=depth,
            max_recv_wr=512,
            link_speed_gbps=seed_gbps,
        )
        segment = rx.allocate(transfer_bytes)
        tx.add_region(2, rx.exposures.expose(1, 1, 1, segment, offset=0, length=transfer_bytes))
        woke = threading.Event()
        tx.set_wakeup(woke.set)
        core = DispatchCore(config, [tx])
        source = memoryview(bytearray(transfer_bytes))
        try:
            start = time.monotonic_ns()
            core.submit(
                [
                    TransferRequest(
                        opcode=Opcode.WRITE,
                        local=source,
                        peer=2,
                        remote_segment=1,
                        remote_offset=0,
                        length=transfer_bytes,
                    )
                    for _ in range(transfers)
                ],
                start,
            )
            ended = 0
            deadline = time.monotonic() + 120
            while ended < transfers and time.monotonic() < deadline:
                woke.clear()  # before the pass: a completion during it is not lost
                ended += len(core.progress(time.monotonic_ns()))
                rx.poll_arrivals(512)
                woke.wait(0.002)
            elapsed_s = (time.monotonic_ns() - start) / 1e9
            nic = core.rail_statistics()[0].nic
            out.append(
                {
                    "depth": depth,
                    "configured_bytes_per_s": rate,
                    "seed_bytes_per_s": seed_gbps * 1e9 / 8,
                    "achieved_bytes_per_s": transfers * transfer_bytes / elapsed_s,
                    "transmit_estimate_bytes_per_s": nic.transmit_bps,
                    "estimate_over_rate": nic.transmit_bps / rate,
                    "selection_bytes_per_s": nic.selection_bps,
                    "selection_over_rate": nic.selection_bps / rate,
                    "transmit_samples": nic.transmit_samples,
                    "selection_samples": nic.selection_samples,
                }
            )
        finally:
            tx.set_wakeup(None)
            tx.close()
            rx.close()
    return out


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--quick", is_flag=True, help="A smoke run of a few seconds.")
def main(quick: bool) -> None:
    """The verbs Device over soft verbs: one-sided write rates and posting cost; prints JSON."""
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="tent-bench-", dir=shm) as base:
        _BASE.append(base)
        result = _run(quick)
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _run(quick: bool) -> dict[str, Any]:
    return {
        "benchmark": "verbs",
        "python": platform.python_version(),
        "quick": quick,
        "one_sided_write": one_sided_write(quick),
        "posting_cost": posting_cost(quick),
        "transmit_meter": transmit_meter(quick),
    }


if __name__ == "__main__":
    main()
