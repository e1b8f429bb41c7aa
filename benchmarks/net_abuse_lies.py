"""The data-plane lies of the network-abuse benchmark (``net_abuse.py``): authenticated peers,
each of its own id and key, that lie to the receiver over raw data connections.

A lie quarantines its teller for good, so no two lies share a peer (``LIES``, ``LIARS``). Each
``_tell_*`` function tells its attack's lies and returns what the receiver answered, when
(``header``: before any payload byte was sent) and with what. The benchmark itself is
``net_abuse.py`` (the attacks and the rows) and ``net_abuse_bench.py`` (the receiver, the
honest sender, the guards); this module imports neither.
"""

from __future__ import annotations

import collections
import contextlib
import os
import struct
import sys
import time
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "transport" / "net"))

from attackers import (  # the tests' hostile peers
    Liar,
    LiarSession,
    RawControl,
    RawData,
    write_header,
)
from procs import KEY, credit_config
from tent_transport.config import load_engine_config
from tent_transport.control import FrameKind, SessionBootstrap, encode_frame
from tent_transport.devices.tcp import WireOpcode, checksum
from tent_transport.engine._receiving import INTEGRITY_FAILURES
from tent_transport.segments import decode_descriptors

from tent_credit import Heartbeat, SessionId, encode

# The receiver's memory (the benchmark's layout, kept here so that both modules read one copy):
# the honest sender's region of REGION_BLOCKS blocks between two guards, then the liars'.
BLOCK = 64 << 10
REGION_BLOCKS = 16
GUARD = 256 << 10  # never exposed: a byte changed here was written outside every grant
HONEST = 1  # the honest sender's peer id

# The data-plane lies of authenticated peers (issue 27), each told by a peer of its own id and
# key (a lie quarantines its teller for good, so no lie shares one)
LIES = {
    "forged_bind": ("forged_bind",),
    "outside_region": (
        "past_end",
        "before_start",
        "wrapping_offset",
        "unexposed_segment",
        "honest_region",
    ),
    "past_credit": (
        "over_bytes",
        "over_slots",
        "undercharge",
        "uncredited",
        "transfers_past_slots",
        "never_negotiated",
    ),
    "fenced_session": ("superseded_header", "fenced_lease", "stale_connection"),
    "bad_crc": ("bad_crc",),
    "never_reads": ("never_reads",),
}
LIARS = {lie: 20 + i for i, lie in enumerate(lie for lies in LIES.values() for lie in lies)}
DATA_ATTACKS = tuple(LIES)
LIAR_BLOCKS = 4  # the region exposed to every liar, between two guards
LIAR_OFFSET = GUARD + REGION_BLOCKS * BLOCK + GUARD
CHUNK = 4096  # a liar's write (within its initial grant of 2 blocks)
_HELLO = struct.Struct("!4sHBQ32s")  # the control handshake's hello (control/_handshake)
_FRAME_HEADER = struct.Struct("!IB")


# the lies told over sessions opened by hand (no engine: a legacy sender's, never negotiated)
_BY_HAND = ("never_negotiated", "stale_connection")
# the lies that need some credit granted to be told (a write within it); the others are
# refused whatever their teller holds
_NEED_CREDIT = ("bad_crc", "transfers_past_slots")


@attrs.frozen
class _Stage:
    """What the lies of one attack are told with."""

    liars: dict[str, Liar]
    sessions: dict[str, LiarSession]
    target: dict[str, int]
    end: float
    halt: Any

    @property
    def control(self) -> int:
        return self.target["control"]

    @property
    def data(self) -> int:
        return self.target["data"]


def _liars(name: str, target: dict[str, int], seconds: float, halt: Any, out: Any) -> None:
    """The data-plane lies of ``name``: each lie told by an authenticated peer of its own
    (``attackers.Liar``: its own id and key, a session, credit and a region of its own), over
    raw data connections bound with its session's data key. Reports each lie's outcome:
    ``when`` the receiver answered (``header``: before any payload byte was sent) and
    ``what`` (the acknowledgement's status, ``closed`` or ``silent``)."""
    config = load_engine_config(credit_config("required", slots=8, block=BLOCK, batch=2))
    liars: dict[str, Liar] = {}
    ready = False
    try:
        sessions: dict[str, LiarSession] = {}
        # those that need credit first: the receiver's capacity (8 blocks) runs out after a
        # few initial grants of 2
        for lie in sorted(LIES[name], key=lambda lie: lie not in _NEED_CREDIT):
            if lie not in _BY_HAND:
                liar = Liar(
                    LIARS[lie], receiver=2, key=KEY, control_port=target["control"], config=config
                )
                liars[lie] = liar
                sessions[lie] = liar.wait_session(credit=lie in _NEED_CREDIT, timeout_s=20)
        out.send({"ready": True})  # every liar holds its session: the attack starts now
        ready = True
        cpu = time.process_time()
        end = time.monotonic() + seconds
        result = _TELL[name](_Stage(liars, sessions, target, end, halt))
        # a quarantined liar's engine keeps reconnecting (each refused) until halted
        while not halt.is_set() and time.monotonic() < end + 10:  # bounded
            halt.wait(0.05)
        result["cpu_s"] = round(time.process_time() - cpu, 3)
        result["liar_reconnects"] = sum(
            liar.engine.engine._links[liar.peer].client.statistics().reconnects
            for liar in liars.values()
        )
    except Exception as exc:  # reported, not raised: the bench reads one result either way
        if not ready:
            out.send({"ready": True})  # what _child waits for first
        result = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        for liar in liars.values():
            with contextlib.suppress(Exception):
                liar.close()
    out.send(result)


def _header(state: LiarSession, payload: bytes, **lie: Any) -> Any:
    """A credited write of ``payload`` at the start of the liar's region, within its grant,
    with what ``lie`` changes."""
    segment, offset, _ = state.region
    fields: dict[str, Any] = {
        "session": state.session,
        "segment": segment,
        "offset": offset,
        "payload": payload,
        "lease": state.lease,
        "charge": (len(payload), 1, 0, 1),
        **lie,
    }
    return write_header(**fields)


def _told(when: str, what: str, expected: tuple[str, ...]) -> dict[str, Any]:
    return {"when": when, "what": what, "as_expected": what in expected}


def _once(
    liar: Liar, state: LiarSession, data: int, request: Any, payload: bytes
) -> tuple[str, str]:
    raw = liar.bind(data, state)
    try:
        return raw.write(request, payload)
    finally:
        raw.close()


def _tell_forged_bind(stage: _Stage) -> dict[str, Any]:
    """Data connections whose bind lies, each followed at once by a credited write that its
    own session could make: one claiming the honest peer (with the liar's own data key), one
    proved with a made-up key, one naming another rail. Each must be closed unanswered."""
    liar, state = stage.liars["forged_bind"], stage.sessions["forged_bind"]
    payload = b"\x5a" * CHUNK
    request = _header(state, payload).pack() + payload
    outcomes: collections.Counter[str] = collections.Counter()
    variants = ("claims_honest", "bad_mac", "other_rail")
    n = 0
    while time.monotonic() < stage.end and n < 20_000 and not stage.halt.is_set():  # bounded
        variant = variants[n % len(variants)]
        n += 1
        key, peer, rail = state.data_key, liar.me, 0
        if variant == "claims_honest":
            peer = HONEST
        elif variant == "bad_mac":
            key = os.urandom(32)
        else:
            rail = 1
        try:
            raw = RawData(stage.data, timeout_s=2.0)
        except OSError:
            outcomes[f"{variant}:refused_connect"] += 1
            continue
        try:
            raw.bind(key, peer, rail)
            raw.sock.sendall(request)
            answer = raw.answer(2.0)
        except OSError:
            answer = "closed"
        finally:
            raw.close()
        outcomes[f"{variant}:{answer if isinstance(answer, str) else answer.status.name}"] += 1
    closed = sum(v for k, v in outcomes.items() if k.endswith(":closed"))
    return {
        "binds": n,
        "outcomes": dict(outcomes),
        "lies": {"forged_bind": {"when": "bind", "what": "closed" if closed == n else "answered",
                                 "as_expected": closed == n}},
    }  # fmt: skip


def _tell_outside_region(stage: _Stage) -> dict[str, Any]:
    """Credited writes within the liar's grant that run past its region's stage.end, start before
    it, wrap the 64-bit offset, aim at a segment exposed to nobody, or at the honest peer's
    region: each refused at its header (ACCESS)."""
    payload = b"\x5a" * CHUNK
    lies: dict[str, Any] = {}
    for lie in LIES["outside_region"]:
        state = stage.sessions[lie]
        _, offset, length = state.region
        where = {
            "past_end": {"offset": offset + length - CHUNK // 2},
            "before_start": {"offset": offset - CHUNK // 2},
            "wrapping_offset": {"offset": (1 << 64) - CHUNK // 2},
            "unexposed_segment": {"segment": stage.target["hidden"], "offset": 0},
            "honest_region": {"offset": stage.target["honest"]},
        }[lie]
        when, what = _once(
            stage.liars[lie], state, stage.data, _header(state, payload, **where), payload
        )
        lies[lie] = _told(when, what, ("ACCESS",))
    return {"lies": lies}


def _tell_past_credit(stage: _Stage) -> dict[str, Any]:
    """Writes inside the liar's region that lie about credit: more DATA_BYTES than granted,
    more slots than granted, an undercharge (DATA_BYTES half the length), no lease at all in a
    session that negotiated credit, slot-less slices opening more transfers than its slots
    cover; and a peer that never negotiates credit writing without any (legacy)."""
    data = stage.data
    lies: dict[str, Any] = {}
    for lie in ("over_bytes", "over_slots", "undercharge", "uncredited"):
        state = stage.sessions[lie]
        slots = state.granted.get(2, 0) + 1, state.granted.get(4, 0) + 1
        payload = b"\x5a" * (LIAR_BLOCKS * BLOCK if lie == "over_bytes" else 2 * CHUNK)
        changes: dict[str, dict[str, Any]] = {
            "over_bytes": {},  # its whole region in one write: twice its byte grant
            "over_slots": {"charge": (len(payload), slots[0], 0, slots[1])},
            "undercharge": {"charge": (len(payload) // 2, 1, 0, 1)},
            "uncredited": {"lease": None, "charge": (0, 0, 0, 0)},
        }
        request = _header(state, payload, **changes[lie])
        when, what = _once(stage.liars[lie], state, data, request, payload)
        lies[lie] = _told(when, what, ("REFUSED",))
    # slot-less one-byte slices, each the first of a transfer of its own
    state = stage.sessions["transfers_past_slots"]
    raw = stage.liars["transfers_past_slots"].bind(data, state)
    admitted, last = 0, ("", "")
    try:
        for i in range(64):  # bounded: refused at the first past its slots
            request = _header(
                state, b"\xab", offset=state.region[1] + i, charge=(1, 0, 0, 0),
                write_id=1000 + i,
            )  # fmt: skip
            last = raw.write(request, b"\xab", refusal_s=0.5)
            if last[1] != "OK":
                break
            admitted += 1
    finally:
        raw.close()
    lies["transfers_past_slots"] = {
        **_told(*last, ("REFUSED",)), "admitted_first": admitted,
        "slots": min(state.granted.get(2, 0), state.granted.get(4, 0)),
    }  # fmt: skip
    lies["never_negotiated"] = _never_negotiated(stage.control, stage.data)
    return {"lies": lies}


@attrs.frozen
class _RawSession:
    """A liar's session opened by hand: a raw handshake with its own key and no credit frame
    ever (a legacy sender, as far as the receiver can tell)."""

    control: RawControl
    session: int
    key: bytes = attrs.field(repr=False)
    region: Any
    """The first region exposed to it (a ``SegmentDescriptor``)."""


def _proved(control: int, me: int) -> tuple[RawControl, bytes]:
    """A handshake of ``me`` with its key, its proof sent: ``(connection, data key)``."""
    rc = RawControl(control, claim=me, timeout_s=5.0)
    try:
        rc.hello()
        return rc, rc.prove(KEY)
    except BaseException:
        rc.close()
        raise


def _opened(rc: RawControl, key: bytes) -> _RawSession:
    """The session a proved handshake opened, once the bench exposed it a region."""
    session = SessionBootstrap.decode(rc.frame(FrameKind.SESSION)).session
    regions: tuple[Any, ...] = ()
    deadline = time.monotonic() + 10
    while not regions and time.monotonic() < deadline:  # bounded: the bench exposes it
        regions = decode_descriptors(rc.frame(FrameKind.DESCRIPTORS, timeout_s=10)).regions
    if not regions:
        raise TimeoutError("no region exposed to the session")
    return _RawSession(control=rc, session=session, key=key, region=regions[0])


def _raw_write(opened: _RawSession, payload: bytes, index: int) -> Any:
    """An uncredited write of ``payload`` into block ``index`` of its region."""
    return write_header(
        session=opened.session, segment=opened.region.segment_id,
        offset=opened.region.offset + (index % LIAR_BLOCKS) * len(payload), payload=payload,
        write_id=index + 1,
    )  # fmt: skip


def _never_negotiated(control: int, data: int) -> dict[str, Any]:
    """An authenticated peer that never offers credit (a raw handshake, no credit frame),
    then writes uncredited blocks into its region: the receiver treats it as a legacy sender
    and admits them, because the bench's receiver runs with the explicit legacy fallback
    (``required_fallback``, see :class:`Bench`). Without it, the default of ``required``, they
    are refused at the header (docs/abuse.md; tests/transport/net/test_legacy_writes.py)."""
    me = LIARS["never_negotiated"]
    opened = _opened(*_proved(control, me))
    landed = 0
    outcome: tuple[str, str] = ("", "")
    try:
        raw = RawData(data)
        raw.bind(opened.key, me)
        payload = b"\x3c" * BLOCK
        try:
            for i in range(16):  # bounded: 1 MiB, twice the receiver's whole capacity
                outcome = raw.write(_raw_write(opened, payload, i), payload, refusal_s=0)
                if outcome[1] != "OK":
                    break
                landed += 1
        finally:
            raw.close()
    finally:
        opened.control.close()
    return {
        **_told(*outcome, ("OK",)), "admitted": True,  # not a lie the receiver can tell
        "landed_uncredited_bytes": landed * BLOCK,
    }  # fmt: skip


def _supersede(control: int, me: int) -> RawControl:
    """A handshake of the liar's own id with its own key: the receiver replaces (and fences)
    the session its engine held."""
    rc = RawControl(control, claim=me, timeout_s=5.0)
    rc.hello()
    rc.prove(KEY)
    return rc


def _tell_fenced_session(stage: _Stage) -> dict[str, Any]:
    """Writes of a session the liar no longer holds: on its new session's data connection, a
    header naming the old session, and a lease of the old (fenced) epoch; and, round after
    round, a write on the old session's own data connection sent as a new handshake replaces
    that session (stale: refused or closed, never landed, the liar not quarantined). The
    rounds' sessions are opened by hand and never negotiate credit (their writes are a legacy
    sender's): a new epoch's initial grant would compete with the honest stream's demand,
    and often get nothing while it lasts."""
    control, data = stage.control, stage.data
    payload = b"\x5a" * CHUNK
    lies: dict[str, Any] = {}
    for lie in ("superseded_header", "fenced_lease"):
        liar, old = stage.liars[lie], stage.sessions[lie]
        _supersede(control, liar.me).close()  # its engine reconnects: a new session, epoch
        new = liar.wait_session(not_session=old.session, timeout_s=10)
        change = {"session": old.session} if lie == "superseded_header" else {"lease": old.lease}
        request = _header(new, payload, **change)
        when, what = _once(liar, new, data, request, payload)
        lies[lie] = _told(when, what, ("ACCESS",) if lie == "superseded_header" else ("REFUSED",))
        lies[lie]["epochs"] = [old.lease[1], new.lease[1]]
    me = LIARS["stale_connection"]
    opened = _opened(*_proved(control, me))
    rounds: collections.Counter[str] = collections.Counter()
    n = 0
    try:
        while time.monotonic() < stage.end and n < 50 and not stage.halt.is_set():  # bounded
            n += 1
            raw = RawData(data)
            try:
                raw.bind(opened.key, me)
                # a write that lands first: the connection is bound to the live session
                bound = raw.write(_raw_write(opened, payload, 2 * n), payload, refusal_s=0)
                if bound[1] != "OK":
                    rounds[f"not_bound:{bound[1]}"] += 1
                    break
                rc, key = _proved(control, me)  # the new session's proof is on its way
                # at once: the receiver may read it before or after that proof
                when, what = raw.write(_raw_write(opened, payload, 2 * n + 1), payload)
                try:
                    replaced = _opened(rc, key)  # it did replace the session
                except (OSError, TimeoutError):
                    rc.close()
                    rounds[f"not_replaced:{when}:{what}"] += 1
                    break
                rounds[f"{when}:{what}"] += 1
                opened.control.close()
                opened = replaced
            finally:
                raw.close()
    finally:
        opened.control.close()
    stale_ok = all(k.startswith(("header:", "payload:closed")) and "OK" not in k for k in rounds)
    lies["stale_connection"] = {"rounds": dict(rounds), "as_expected": stale_ok and n > 0}
    return {"lies": lies}


def _tell_bad_crc(stage: _Stage) -> dict[str, Any]:
    """Credited writes within the liar's region and grant whose CRC32C never matches their
    payload, one after another on one connection, until the receiver stops reading them.
    Each is a slot-less slice (DATA_BYTES only) opening a transfer of its own, so that the
    receiver's bound (16) fits the liar's byte grant (a grant is spent by what lands or
    fails, not given back to the sender by a release it does not report)."""
    liar, state = stage.liars["bad_crc"], stage.sessions["bad_crc"]
    payload = b"\x5a" * CHUNK
    raw = liar.bind(stage.data, state)
    outcomes: list[str] = []
    try:
        for i in range(64):  # bounded: quarantined after INTEGRITY_FAILURES
            request = _header(
                state, payload, crc=checksum(payload) ^ 1, charge=(CHUNK, 0, 0, 0),
                write_id=i + 1,
            )  # fmt: skip
            _, what = raw.write(request, payload, refusal_s=0)
            outcomes.append(what)
            if what != "INTEGRITY":
                break
    finally:
        raw.close()
    failures = outcomes.count("INTEGRITY")
    # then refused or closed: quarantined (a header read after the quarantine retired its
    # session is refused as stale, ACCESS or REFUSED)
    expected = failures == INTEGRITY_FAILURES and outcomes[-1] not in ("INTEGRITY", "OK")
    return {
        "lies": {"bad_crc": {"integrity_answers": failures, "then": outcomes[-1],
                             "as_expected": expected}},
    }  # fmt: skip


def _tell_never_reads(stage: _Stage) -> dict[str, Any]:
    """An authenticated peer that stops reading: its engine's control and data connections
    are no longer read, while it asks for answers as fast as the receiver takes its requests:
    READs of its whole region on three more data connections, and heartbeats (each answered
    with a refresh) under its control rate. Nothing of it is ever read."""
    liar, state = stage.liars["never_reads"], stage.sessions["never_reads"]
    engine = liar.engine.engine
    connection = engine._links[liar.peer].client._connection
    assert connection is not None
    rail: Any = engine.rails[0]  # a TcpRail

    def stop_reading() -> None:
        transport: Any = connection._writer.transport
        transport.pause_reading()
        rail._peers[liar.peer]._transport.pause_reading()

    liar.engine._call(stop_reading)
    segment, offset, length = state.region
    read = write_header(
        session=state.session, segment=segment, offset=offset, payload=b"", crc=0,
        opcode=WireOpcode.READ, length=length,
    ).pack()  # fmt: skip
    raws = [liar.bind(stage.data, state) for _ in range(3)]  # max_session_connections: 4
    beat = encode_frame(
        FrameKind.CREDIT,
        encode(Heartbeat(receiver_session_id=SessionId(state.lease[0]), epoch=state.lease[1])),
    )
    reads = [0] * len(raws)
    blocked = [False] * len(raws)
    beats = 0
    try:
        while time.monotonic() < stage.end and not stage.halt.is_set():  # bounded
            for i, raw in enumerate(raws):
                if blocked[i] or reads[i] >= 65_536:  # bounded: 16 GiB asked per connection
                    continue
                raw.sock.settimeout(0.05)
                try:
                    raw.sock.sendall(read * 64)
                    reads[i] += 64
                except TimeoutError:
                    blocked[i] = True  # the receiver stopped reading its requests
            liar.engine._call(lambda: connection._writer.write(beat * 75))
            beats += 75
            time.sleep(0.05)  # 1,500 heartbeats a second: under its control rate (2,000)
        # keep everything unread until the bench has looked at the receiver
        while not stage.halt.is_set() and time.monotonic() < stage.end + 10:  # bounded
            stage.halt.wait(0.05)
    finally:
        for raw in raws:
            raw.close()
    return {
        "read_requests": sum(reads),
        "requested_bytes": sum(reads) * length,
        "connections_blocked": sum(blocked),
        "heartbeats": beats,
        "lies": {"never_reads": {"as_expected": True}},
    }


_TELL = {
    "forged_bind": _tell_forged_bind,
    "outside_region": _tell_outside_region,
    "past_credit": _tell_past_credit,
    "fenced_session": _tell_fenced_session,
    "bad_crc": _tell_bad_crc,
    "never_reads": _tell_never_reads,
}
