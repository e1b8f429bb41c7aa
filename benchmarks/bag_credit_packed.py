"""Baselines for ``tests/models/bag_credit.py``: the same protocol as packed int tuples, and in
Promela for SPIN. Used by ``benchmarks/checker_plain.py``; both must count the readable model's
states (the benchmark checks the counts before it compares rates).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# A packed state: (epoch, granted, freed, buffered, restarts, senders, bag, faults); per
# sender (epoch, limit, used); the bag a sorted tuple of ((sender, kind, epoch, total), copies)
# with kind 1 = grant, 0 = data.
Packed = tuple[Any, ...]


def _add(bag: tuple[Any, ...], msg: tuple[int, ...]) -> tuple[Any, ...]:
    copies = dict(bag)
    copies[msg] = copies.get(msg, 0) + 1
    return tuple(sorted(copies.items()))


def _remove(bag: tuple[Any, ...], msg: tuple[int, ...]) -> tuple[Any, ...]:
    copies = dict(bag)
    copies[msg] -= 1
    if not copies[msg]:
        del copies[msg]
    return tuple(sorted(copies.items()))


def _put(values: tuple[Any, ...], i: int, value: Any) -> tuple[Any, ...]:
    return (*values[:i], value, *values[i + 1 :])


def packed_successors(state: Packed, bounds: dict[str, int]) -> Iterator[Packed]:
    epoch, granted, freed, buffered, restarts, senders, bag, faults = state
    n = len(senders)
    flight = sum(c for _m, c in bag)
    room = flight < bounds["max_in_flight"]
    outstanding = sum(granted) - sum(freed)
    for s in range(n):
        if granted[s] < bounds["max_total"] and outstanding < bounds["capacity"]:
            yield (epoch, _put(granted, s, granted[s] + 1), freed, buffered, restarts, senders,
                   bag, faults)  # fmt: skip
        if room:
            yield (epoch, granted, freed, buffered, restarts, senders,
                   _add(bag, (s, 1, epoch, granted[s])), faults)  # fmt: skip
        se, limit, used = senders[s]
        if used < limit and room:
            spent = _put(senders, s, (se, limit, used + 1))
            yield (epoch, granted, freed, buffered, restarts, spent, _add(bag, (s, 0, se, 0)),
                   faults)  # fmt: skip
        if buffered[s]:
            yield (epoch, granted, _put(freed, s, freed[s] + 1),
                   _put(buffered, s, buffered[s] - 1), restarts, senders, bag, faults)  # fmt: skip
    for msg, _copies in bag:
        s, kind, e, total = msg
        rest = _remove(bag, msg)
        if kind == 1:
            se, limit, used = senders[s]
            if e > se:
                new = (e, total, 0)
            elif e == se:
                new = (se, max(limit, total), used)
            else:
                new = senders[s]
            yield (epoch, granted, freed, buffered, restarts, _put(senders, s, new), rest, faults)
            if faults < bounds["max_faults"]:
                yield (epoch, granted, freed, buffered, restarts, senders, rest, faults + 1)
                if room:
                    yield (epoch, granted, freed, buffered, restarts, senders, _add(bag, msg),
                           faults + 1)  # fmt: skip
        elif e == epoch:
            yield (epoch, granted, freed, _put(buffered, s, buffered[s] + 1), restarts, senders,
                   rest, faults)  # fmt: skip
        else:
            yield (epoch, granted, freed, buffered, restarts, senders, rest, faults)
    if restarts < bounds["max_restarts"]:
        zero = (0,) * n
        yield (epoch + 1, zero, zero, zero, restarts + 1, senders, bag, faults)


def packed_bfs(bounds: dict[str, int]) -> tuple[int, float, float]:
    """A bare BFS over packed tuples (a ``set`` of them, no checks, no parents): states, wall s,
    CPU s."""
    n = bounds["senders"]
    zero = (0,) * n
    initial = (0, zero, zero, zero, 0, ((0, 0, 0),) * n, (), 0)
    wall, cpu = time.perf_counter(), time.process_time()
    seen = {initial}
    queue = deque([initial])
    while queue:
        for nxt in packed_successors(queue.popleft(), bounds):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return len(seen), time.perf_counter() - wall, time.process_time() - cpu


def promela(bounds: dict[str, int]) -> str:
    """The protocol in Promela: one process, each action one ``d_step`` (one transition)."""
    n, epochs, totals = bounds["senders"], bounds["max_restarts"] + 1, bounds["max_total"] + 1
    lines = [
        f"#define N {n}",
        f"#define EP {epochs}",
        f"#define TOT {totals}",
        f"#define CAP {bounds['capacity']}",
        f"#define MAXT {bounds['max_total']}",
        f"#define MAXF {bounds['max_faults']}",
        f"#define MAXR {bounds['max_restarts']}",
        f"#define MAXB {bounds['max_in_flight']}",
        "typedef Grants { byte c[EP * TOT] };",
        "byte epoch, restarts, faults, flight;",
        "byte granted[N], freed[N], buffered[N];",
        "byte sepoch[N], slimit[N], sused[N];",
        "Grants grant[N]; byte data[N * EP];",
        "active proctype world() {",
        "  byte s, e, t, o;",
        "  do",
    ]
    for s in range(n):
        o = " + ".join(f"granted[{i}] - freed[{i}]" for i in range(n))
        lines += [
            f"  :: d_step {{ granted[{s}] < MAXT && ({o}) < CAP -> granted[{s}]++ }}",
            f"  :: d_step {{ flight < MAXB -> grant[{s}].c[epoch * TOT + granted[{s}]]++;"
            " flight++ }",
            f"  :: d_step {{ sused[{s}] < slimit[{s}] && flight < MAXB -> sused[{s}]++;"
            f" data[{s} * EP + sepoch[{s}]]++; flight++ }}",
            f"  :: d_step {{ buffered[{s}] > 0 -> buffered[{s}]--; freed[{s}]++ }}",
        ]
        for e in range(epochs):
            lines.append(
                f"  :: d_step {{ data[{s} * EP + {e}] > 0 -> data[{s} * EP + {e}]--; flight--;"
                f" if :: epoch == {e} -> buffered[{s}]++ :: else -> skip fi }}"
            )
            for t in range(totals):
                g = f"grant[{s}].c[{e * totals + t}]"
                lines += [
                    f"  :: d_step {{ {g} > 0 -> {g}--; flight--;"
                    f" if :: {e} > sepoch[{s}] -> sepoch[{s}] = {e}; slimit[{s}] = {t};"
                    f" sused[{s}] = 0 :: {e} == sepoch[{s}] && {t} > slimit[{s}] ->"
                    f" slimit[{s}] = {t} :: else -> skip fi }}",
                    f"  :: d_step {{ {g} > 0 && faults < MAXF -> {g}--; flight--; faults++ }}",
                    f"  :: d_step {{ {g} > 0 && faults < MAXF && flight < MAXB -> {g}++;"
                    " flight++; faults++ }",
                ]
    zeros = " ".join(f"granted[{i}] = 0; freed[{i}] = 0; buffered[{i}] = 0;" for i in range(n))
    lines += [
        f"  :: d_step {{ restarts < MAXR -> epoch++; restarts++; {zeros} }}",
        "  od",
        "}",
    ]
    return "\n".join(lines) + "\n"


def spin_run(bounds: dict[str, int]) -> dict[str, Any] | None:
    """Compile and run the Promela model with SPIN (``-DSAFETY``, exhaustive); None without
    ``spin`` or ``gcc`` on PATH. Returns SPIN's stored states and its own timing."""
    if shutil.which("spin") is None or shutil.which("gcc") is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "bag.pml").write_text(promela(bounds))
        subprocess.run(["spin", "-a", "bag.pml"], cwd=folder, check=True, capture_output=True)
        subprocess.run(
            ["gcc", "-O2", "-DSAFETY", "-DNOREDUCE", "-DMEMLIM=2048", "-o", "pan", "pan.c"],
            cwd=folder,
            check=True,
            capture_output=True,
        )
        started = time.perf_counter()
        out = subprocess.run(
            ["./pan", "-m100000"], cwd=folder, check=True, capture_output=True, text=True
        ).stdout
        wall = time.perf_counter() - started
    stored = re.search(r"(\d+) states, stored", out)
    elapsed = re.search(r"pan: elapsed time ([\d.e+-]+) seconds", out)
    memory = re.search(r"([\d.]+)\s+total actual memory usage", out)
    states = int(stored.group(1)) if stored else 0
    seconds = float(elapsed.group(1)) if elapsed else wall
    return {
        "stored_states": states,
        "seconds": seconds,
        "wall_seconds_incl_startup": round(wall, 3),
        "states_per_second": round(states / seconds) if seconds > 0 else None,
        "total_memory_mb": float(memory.group(1)) if memory else None,
    }
