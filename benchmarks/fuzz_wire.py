"""Fuzz the wire decoder and both endpoints with hostile bytes; print JSON counts by outcome.

Every input goes to ``decode`` and to one of two live endpoints (a sender and a receiver
endpoint of an activated key, rebuilt every ``--rebuild`` inputs so they are hit in many
states). The generators (``--seed`` makes a run reproducible):

* ``random``: random bytes;
* ``flip`` / ``truncate`` / ``extend`` / ``splice``: bit flips, truncations, extensions and
  boundary-byte splices of the golden vectors (``tests/golden/wire_vectors.json``);
* ``wrong_type``: valid CBOR of a golden vector's structure with one item replaced by another
  type or a huge integer (canonical or not);
* ``deep``: deep nesting; ``huge_length``: headers that announce huge lengths;
  ``duplicate_keys``: maps with duplicate keys; ``indefinite``: indefinite lengths;
* ``boundary``: well-formed messages with every field at a boundary value (0, 1, 2**16 ± 1,
  2**32 ± 1, 2**64 ± 1, 2**128 ± 1), aimed at the endpoints' current session and epoch.

A run fails (exit status 1, ``"failures"`` listed) when anything raises that is not the
documented outcome (``DecodeError`` from ``decode``; nothing from ``receive_message`` /
``receive_batch``), or when an accepted input does not re-encode to the same bytes.

``--atheris-runs N`` adds coverage-guided fuzzing of ``decode`` with atheris (libFuzzer) in a
child process, seeded with the golden vectors; without atheris installed (``pip install
'.[fuzz]'``) it runs Hypothesis' ``fuzz_one_input`` over random buffers instead and says so.
"""

from __future__ import annotations

import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cbor2
import click

from tent_credit import CreditResource, Plan, SessionId, charge_for_plan
from tent_credit._allocator import AllocatorConfig
from tent_credit._endpoints import CreditReceiver, ReceiverEndpoint, SenderEndpoint
from tent_credit._wire import _LAYOUTS, WireErrorCode, _Kind, decode, encode
from tent_credit.errors import DecodeError

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "wire_vectors.json"
R = CreditResource
SLOT = 4096
CHARGE = charge_for_plan(Plan.REMOTE_DIRECT_WRITE, SLOT)
BOUNDARIES = (0, 1, 2**16 - 1, 2**16, 2**32 - 1, 2**32, 2**64 - 1, 2**64, 2**128 - 1, 2**128)
BOUNDARY_BYTES = (0x00, 0x17, 0x18, 0x19, 0x1A, 0x1B, 0x1C, 0x1F, 0x5F, 0x7F, 0x9F, 0xBF, 0xFF)


def golden_vectors() -> list[bytes]:
    document = json.loads(GOLDEN.read_text())
    return [bytes.fromhex(v["hex"]) for v in document["vectors"]]


# --------------------------------------------------------------------------- generators


class Generators:
    """The input generators, each ``rng -> bytes``; ``context`` aims ``boundary`` inputs."""

    def __init__(self, rng: random.Random, vectors: list[bytes]) -> None:
        self.rng = rng
        self.vectors = vectors
        self.structures = [cbor2.loads(v) for v in vectors]
        self.context = (1, 1)  # (session, epoch) of the live endpoints
        self.table: dict[str, Callable[[], bytes]] = {
            "random": self.random,
            "flip": self.flip,
            "truncate": self.truncate,
            "extend": self.extend,
            "splice": self.splice,
            "wrong_type": self.wrong_type,
            "deep": self.deep,
            "huge_length": self.huge_length,
            "duplicate_keys": self.duplicate_keys,
            "indefinite": self.indefinite,
            "boundary": self.boundary,
        }
        # boundary and mutation inputs reach the deep branches: they get more of the budget
        self.weights = [3, 3, 1, 1, 2, 3, 1, 1, 1, 1, 4]

    def next(self) -> tuple[str, bytes]:
        name = self.rng.choices(list(self.table), weights=self.weights)[0]
        return name, self.table[name]()

    def _vector(self) -> bytearray:
        return bytearray(self.rng.choice(self.vectors))

    def random(self) -> bytes:
        size = self.rng.choice((self.rng.randrange(0, 16), self.rng.randrange(0, 300)))
        return self.rng.randbytes(size)

    def flip(self) -> bytes:
        data = self._vector()
        for _ in range(self.rng.randint(1, 3)):
            bit = self.rng.randrange(len(data) * 8)
            data[bit // 8] ^= 1 << (bit % 8)
        return bytes(data)

    def truncate(self) -> bytes:
        data = self._vector()
        return bytes(data[: self.rng.randrange(len(data))])

    def extend(self) -> bytes:
        return bytes(self._vector()) + self.rng.randbytes(self.rng.randint(1, 16))

    def splice(self) -> bytes:
        data = self._vector()
        data[self.rng.randrange(len(data))] = self.rng.choice(BOUNDARY_BYTES)
        return bytes(data)

    def _foreign(self) -> Any:
        return self.rng.choice(
            (
                "text",
                b"bytes",
                1.5,
                None,
                True,
                -1,
                -(2**64),
                2**64,
                2**128,
                2 ** self.rng.randint(129, 20_000),
                [],
                [1, [2, [3, [4]]]],
                {1: 2},
                cbor2.CBORTag(99, 1),
            )
        )

    def wrong_type(self) -> bytes:
        structure = self.rng.choice(self.structures)

        def replace(item: Any, depth: int) -> Any:
            if isinstance(item, list) and item and self.rng.random() < 0.7:
                i = self.rng.randrange(len(item))
                return [*item[:i], replace(item[i], depth + 1), *item[i + 1 :]]
            return self._foreign()

        mutated = replace(structure, 0)
        return cbor2.dumps(mutated, canonical=self.rng.random() < 0.5)

    def deep(self) -> bytes:
        depth = self.rng.choice((5, 6, 100, self.rng.randint(1, 10_000)))
        head = self.rng.choice((b"\x81", b"\xc2", b"\x9f", b"\xa1\x00"))
        return head * depth + b"\x00"

    def huge_length(self) -> bytes:
        major = self.rng.choice((2, 3, 4, 5)) << 5
        info, size = self.rng.choice(((26, 4), (27, 8)))
        argument = self.rng.choice((2**32 - 1, 2**63, 2**64 - 1, self.rng.getrandbits(size * 8)))
        argument %= 1 << (size * 8)
        header = bytes([major | info]) + argument.to_bytes(size, "big")
        prefix = self.rng.choice((b"", b"\x82\x06", b"\x85\x06\x01"))
        return prefix + header + self.rng.randbytes(self.rng.randint(0, 8))

    def duplicate_keys(self) -> bytes:
        key = self.rng.choice((b"\x01", b"\x61a", b"\x00"))
        pairs = key + b"\x01" + key + b"\x02"
        inner = b"\xa2" + pairs
        return self.rng.choice((inner, b"\x83\x06\x01" + inner, b"\x82" + inner + inner))

    def indefinite(self) -> bytes:
        head = self.rng.choice((b"\x9f", b"\x5f", b"\x7f", b"\xbf"))
        body = self.rng.choice((b"\x06\x01\x01\x01\x00", b"\x41\x00", b"\x61a", b""))
        tail = self.rng.choice((b"\xff", b""))
        return self.rng.choice((head + body + tail, b"\x85" + head + body + tail))

    def boundary(self) -> bytes:
        # A message of a known layout, each field either what the live key expects or a
        # boundary value (of the right kind or not), so the endpoints' deep branches run.
        session, epoch = self.context
        layout = self.rng.choice(_LAYOUTS)
        values: list[Any] = [layout.tag, 1]
        for name, kind in layout.fields:
            if self.rng.random() < 0.85:
                values.append(self._plausible(name, kind, session, epoch))
            elif self.rng.random() < 0.8:
                values.append(self.rng.choice(BOUNDARIES))
            else:
                values.append(self._foreign())
        return cbor2.dumps(values, canonical=True)

    def _plausible(self, name: str, kind: _Kind, session: int, epoch: int) -> Any:
        rng = self.rng
        if kind is _Kind.SESSION:
            return rng.choice((session, session, session + 1, 1))
        if name == "epoch":
            return rng.choice((epoch, epoch, epoch + 1, max(epoch - 1, 0), 0))
        if name == "sequence":
            return rng.choice((rng.randint(1, 64), rng.choice(BOUNDARIES)))
        if kind is _Kind.VERSIONS:
            return rng.choice(([1], [1], [1, 2], [9]))
        if name == "selected_version":
            return rng.choice((1, 1, 0, 2))
        if kind is _Kind.AMOUNTS:
            resources = rng.sample(range(1, 5), rng.randint(0, 4))
            amount = (rng.randint(0, 16 * SLOT), rng.choice(BOUNDARIES), rng.randint(0, 16))
            return [[r, rng.choice(amount)] for r in resources]
        return rng.choice((0, 0, 0, 1, 10, rng.choice(BOUNDARIES)))


# --------------------------------------------------------------------------- endpoints


def _config() -> AllocatorConfig:
    return AllocatorConfig(
        capacity={R.DATA_BYTES: 8 * SLOT, R.REQUEST_SLOTS: 8, R.CONSUMER_SLOTS: 8},
        control_slots=4,
        max_grant={R.DATA_BYTES: 2 * SLOT, R.REQUEST_SLOTS: 2, R.CONSUMER_SLOTS: 2},
        max_keys=64,
        retry_after_us=100,
    )


class Endpoints:
    """A sender and a receiver endpoint of one activated key, fed hostile input."""

    def __init__(self, session: int) -> None:
        self.rx = CreditReceiver(_config(), SessionId(session), freshness_ttl_ms=10)
        self.rx_ep: ReceiverEndpoint = self.rx.accept(7)
        self.tx = SenderEndpoint(sender_peer=7)
        self.now = 0
        self.tx.connect(0)
        assert CHARGE is not None
        for _ in range(3):
            self.now += 2_000_000
            for data in self.tx.messages_to_send(self.now):
                self.rx_ep.receive_message(data, self.now)
            self.tx.receive_batch(self.rx_ep.messages_to_send(self.now), self.now)
            self.tx.set_pending_demand({r: a for r, a in CHARGE.parts})

    @property
    def context(self) -> tuple[int, int]:
        return self.rx.session.value, self.rx_ep.epoch

    def feed(self, data: bytes, to_sender: bool) -> list[str]:
        self.now += 1000
        if to_sender:
            events = self.tx.receive_message(data, self.now)
            self.tx.messages_to_send(self.now)  # whatever it now sends must still encode
        else:
            events = self.rx_ep.receive_message(data, self.now)
            self.rx_ep.messages_to_send(self.now)
            stats = self.rx.allocator.statistics()
            for r, cap in stats.capacity.items():
                if stats.outstanding[r] > cap:
                    raise AssertionError(f"{r.name} outstanding over capacity")
        return [e.kind for e in events]


# --------------------------------------------------------------------------- the campaign


def run(inputs: int, seed: int, rebuild: int = 10_000) -> dict[str, Any]:
    """Run ``inputs`` inputs; the counts by generator and outcome, and any failures."""
    rng = random.Random(seed)
    generators = Generators(rng, golden_vectors())
    decode_outcomes: collections.Counter[str] = collections.Counter()
    endpoint_outcomes: collections.Counter[str] = collections.Counter()
    by_generator: collections.Counter[str] = collections.Counter()
    failures: list[dict[str, str]] = []
    endpoints = Endpoints(session=1)
    started = time.perf_counter()
    for i in range(inputs):
        if i % rebuild == 0 and i:
            endpoints = Endpoints(session=rng.choice((1, 2**64, 2**128 - 1)))
        generators.context = endpoints.context
        name, data = generators.next()
        by_generator[name] += 1
        try:
            outcome = _decode_outcome(data)
        except Exception as exc:  # anything else is a finding
            failures.append(_failure("decode", name, data, exc))
            outcome = "failure"
        decode_outcomes[outcome] += 1
        try:
            for kind in endpoints.feed(data, to_sender=bool(i % 2)) or ["no_event"]:
                endpoint_outcomes[kind] += 1
        except Exception as exc:
            failures.append(_failure("endpoint", name, data, exc))
            endpoint_outcomes["failure"] += 1
            endpoints = Endpoints(session=1)
        if len(failures) >= 20:
            break
    elapsed = time.perf_counter() - started
    return {
        "inputs": sum(by_generator.values()),
        "seed": seed,
        "seconds": round(elapsed, 2),
        "inputs_per_second": round(sum(by_generator.values()) / elapsed) if elapsed else None,
        "by_generator": dict(sorted(by_generator.items())),
        "decode": dict(sorted(decode_outcomes.items())),
        "endpoints": dict(sorted(endpoint_outcomes.items())),
        "failures": failures,
    }


def _decode_outcome(data: bytes) -> str:
    try:
        message = decode(data)
    except DecodeError as exc:
        if not isinstance(exc.code, WireErrorCode):
            raise AssertionError("a DecodeError without a wire code") from exc
        return f"refused:{exc.code.name}"
    if encode(message) != data:
        raise AssertionError("an accepted input does not re-encode to the same bytes")
    return "accepted"


def _failure(where: str, generator: str, data: bytes, exc: BaseException) -> dict[str, str]:
    return {
        "where": where,
        "generator": generator,
        "input_hex": data[:256].hex(),
        "error": f"{type(exc).__name__}: {str(exc)[:200]}",
    }


# --------------------------------------------------------------------------- coverage-guided


def _one_input(data: bytes) -> None:
    """The coverage-guided target: only a DecodeError or an exact round trip."""
    try:
        message = decode(data)
    except DecodeError:
        return
    if encode(message) != data:
        raise AssertionError("accepted input does not re-encode to the same bytes")


def _atheris_child(argv: list[str]) -> None:
    import atheris  # type: ignore[import-not-found,unused-ignore]

    # tent_credit (and cbor2's Python parts) are imported already: instrument what is loaded
    atheris.instrument_all()
    atheris.Setup(argv, _one_input)
    atheris.Fuzz()


def coverage_guided(runs: int, seed: int) -> dict[str, Any]:
    """Coverage-guided fuzzing of ``decode``: atheris if installed, else Hypothesis."""
    try:
        import atheris  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        return _hypothesis_fuzz(runs, seed)
    with tempfile.TemporaryDirectory() as corpus:
        for i, vector in enumerate(golden_vectors()):
            Path(corpus, f"golden{i}").write_bytes(vector)
        started = time.perf_counter()
        child = subprocess.run(
            [
                sys.executable,
                __file__,
                "--atheris-child",
                f"-runs={runs}",
                f"-seed={seed or 1}",
                "-max_len=512",
                corpus,
            ],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        elapsed = time.perf_counter() - started
    stats = _libfuzzer_stats(child.stderr)
    return {
        "engine": "atheris",
        "runs": stats.get("runs", runs),
        "coverage_edges": stats.get("cov"),
        "features": stats.get("ft"),
        "seconds": round(elapsed, 2),
        "exit_status": child.returncode,
        "crash": None if child.returncode == 0 else child.stderr[-2000:],
    }


def _libfuzzer_stats(stderr: str) -> dict[str, int]:
    # libFuzzer's status lines: "#4096 pulse cov: 312 ft: 840 ..." and "Done 100000 runs"
    stats: dict[str, int] = {}
    for line in stderr.splitlines():
        words = line.split()
        if line.startswith("Done ") and len(words) > 1 and words[1].isdigit():
            stats["runs"] = int(words[1])
        for key in ("cov:", "ft:"):
            if key in words:
                value = words[words.index(key) + 1]
                if value.isdigit():
                    stats[key[:-1]] = int(value)
    return stats


def _hypothesis_fuzz(runs: int, seed: int) -> dict[str, Any]:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(database=None)
    @given(st.binary(max_size=512))
    def target(data: bytes) -> None:
        _one_input(data)

    rng = random.Random(seed)
    started = time.perf_counter()
    for _ in range(runs):
        target.hypothesis.fuzz_one_input(rng.randbytes(rng.randrange(1, 600)))
    return {
        "engine": "hypothesis.fuzz_one_input (atheris not installed)",
        "runs": runs,
        "seconds": round(time.perf_counter() - started, 2),
        "exit_status": 0,
        "crash": None,
    }


@click.command(
    help=(__doc__ or "").splitlines()[0], context_settings={"help_option_names": ["-h", "--help"]}
)
@click.option("--inputs", type=click.IntRange(min=1), default=1_000_000, show_default=True)
@click.option("--seed", type=int, default=2519, show_default=True)
@click.option("--atheris-runs", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--quick", is_flag=True, help="20,000 inputs, 2,000 guided runs")
def cli(inputs: int, seed: int, atheris_runs: int, quick: bool) -> None:
    guided = atheris_runs
    if quick:
        inputs, guided = 20_000, 2_000
    report = run(inputs, seed)
    if guided:
        report["coverage_guided"] = coverage_guided(guided, seed)
    print(json.dumps(report, indent=2))
    guided_ok = not guided or report["coverage_guided"]["exit_status"] == 0
    if report["failures"] or not guided_ok:
        raise SystemExit(1)


def main() -> None:
    """The campaign's CLI, or (``--atheris-child``, libFuzzer's own arguments after it) the
    atheris process ``coverage_guided`` starts, whose arguments click must not parse."""
    args = sys.argv[1:]
    if args and args[0] == "--atheris-child":
        _atheris_child([sys.argv[0], *args[1:]])
        return
    cli()


def iter_inputs(count: int, seed: int) -> Iterator[tuple[str, bytes]]:
    """``count`` generated inputs (for tests): ``(generator, bytes)``."""
    generators = Generators(random.Random(seed), golden_vectors())
    for _ in range(count):
        yield generators.next()


if __name__ == "__main__":
    main()
