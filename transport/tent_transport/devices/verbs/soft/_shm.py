"""The soft fabric's shared memory: what an initiator touches in a target that does not run.

A *fabric* is a directory (``/dev/shm/...`` by default). Every soft HCA (one ``Context``) is a
*node* in it, ``node-<id>/``, holding only memory-mapped files:

- ``node``: the owner's pid (a dead owner is an unreachable node: transport retry exceeded);
- ``keys``: the key table, one 48-byte entry per memory region, written only by the owner and read
  by initiators to check an rkey, its access flags, its PD and its range;
- ``buf-<n>``: registered memory that other processes may write into or read from;
- ``qp-<qpn>``: a QP's responder side: its state, PD, access flags, connected peer and
  ``max_dest_rd_atomic``, the ring of posted receives (the owner produces, the one connected
  initiator consumes) and the ring of inbound receive completions (the initiator produces, the
  owner consumes). The owner writes the header; an initiator writes only its state, to ERR,
  when the responder fails a request (Linux rxe's class C errors), under the file's lock.

Rings are single-producer single-consumer with 8-byte aligned indices, so neither side waits for the
other; only taking a posted receive and the owner flushing them at ERR share an ``flock``, held for
a few instructions, so a stopped owner that is idle blocks nobody.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import mmap
import os
import secrets
import struct
from collections import deque
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "KEY_ENTRY",
    "KEY_SLOTS",
    "KeyEntry",
    "KeyTable",
    "NodeDir",
    "QPFile",
    "SharedBuffer",
    "address_of",
    "node_alive",
]

KEY_SLOTS = 4096  # MRs per node; the rkey's low 12 bits index the slot
_KEY_INDEX_BITS = 12
# rkey, valid, access, pd, buf, base_addr, length, file_offset
KEY_ENTRY = struct.Struct("<IIIIQQQQ")

# QP file: state, pd, access, remote node (lo, hi), remote qpn, recv capacity, max_dest_rd_atomic
_QP_HEADER = struct.Struct("<IIIIIIII")
_QP_HEADER_SIZE = 64
_STATE = struct.Struct("<I")  # the header's first field
_RING_INDEX = struct.Struct("<Q")
_RECV_ENTRY = struct.Struct("<Q")  # wr_id
# wr_id, byte_len, imm_data, status, opcode, src_qp
_INBOUND_ENTRY = struct.Struct("<QIIIII4x")


def address_of(buffer: mmap.mmap | memoryview | bytearray) -> int:
    """The virtual address of a writable buffer's first byte (what a verbs SGE or MR names)."""
    view = ctypes.c_char.from_buffer(buffer)
    return ctypes.addressof(view)


def node_alive(pid: int) -> bool:
    """True if process ``pid`` exists (a SIGSTOPped process is alive: RC needs no target code)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SharedBuffer:
    """One ``buf-<n>`` file mapped in this process; ``address`` is where it lives here."""

    def __init__(self, path: Path, length: int, *, create: bool) -> None:
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, length)
            else:
                length = os.fstat(fd).st_size
            self.mm = mmap.mmap(fd, length)
        finally:
            os.close(fd)
        self.path = path
        self.length = length
        self._anchor = ctypes.c_char.from_buffer(self.mm)
        self.address = ctypes.addressof(self._anchor)

    def close(self) -> None:
        """Unmap it; a memoryview a caller still holds keeps the mapping alive instead."""
        del self._anchor
        with contextlib.suppress(BufferError):
            self.mm.close()


class KeyEntry:
    """A decoded key-table entry (the responder's view of one MR)."""

    __slots__ = ("access", "base_addr", "buf", "file_offset", "length", "pd", "rkey", "valid")

    def __init__(self, raw: tuple[int, ...]) -> None:
        (
            self.rkey,
            self.valid,
            self.access,
            self.pd,
            self.buf,
            self.base_addr,
            self.length,
            self.file_offset,
        ) = raw


class KeyTable:
    """The ``keys`` file: MR entries by slot. The owner writes, initiators only read."""

    def __init__(self, path: Path, *, create: bool) -> None:
        size = KEY_SLOTS * KEY_ENTRY.size
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            self.mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._generation = [0] * KEY_SLOTS if create else []
        # FIFO reuse: a freed slot comes back only after every other free slot was used
        self._free: deque[int] = deque(range(KEY_SLOTS) if create else ())

    def allocate(  # noqa: PLR0917 (the entry's fields, in its layout's order)
        self, access: int, pd: int, buf: int, base: int, length: int, offset: int
    ) -> int:
        """Write a valid entry and return its rkey; raises ``MemoryError`` if every slot is used."""
        if not self._free:
            raise MemoryError("soft key table full")
        slot = self._free.popleft()
        # A 20-bit generation per slot and FIFO reuse: a stale rkey revives only after 2**20
        # reuses of its slot, each after all other free slots.
        self._generation[slot] = (self._generation[slot] + 1) & 0xFFFFF
        rkey = (self._generation[slot] << _KEY_INDEX_BITS) | slot
        where = slot * KEY_ENTRY.size
        # valid is written last (x86 keeps store order), so a reader never sees half an entry.
        self.mm[where : where + KEY_ENTRY.size] = KEY_ENTRY.pack(
            rkey, 0, access, pd, buf, base, length, offset
        )
        self.mm[where + 4 : where + 8] = struct.pack("<I", 1)
        return rkey

    def invalidate(self, rkey: int) -> None:
        """Invalidate ``rkey`` at once: every later lookup by any process fails."""
        slot = rkey & (KEY_SLOTS - 1)
        where = slot * KEY_ENTRY.size
        self.mm[where + 4 : where + 8] = struct.pack("<I", 0)
        self._free.append(slot)

    def lookup(self, rkey: int) -> KeyEntry | None:
        """The valid entry whose rkey is exactly ``rkey``, else None."""
        slot = rkey & (KEY_SLOTS - 1)
        entry = KeyEntry(KEY_ENTRY.unpack_from(self.mm, slot * KEY_ENTRY.size))
        if entry.valid != 1 or entry.rkey != rkey:
            return None
        return entry

    def invalidate_all(self) -> None:
        """Invalidate every entry (the node closes)."""
        for slot in range(KEY_SLOTS):
            self.mm[slot * KEY_ENTRY.size + 4 : slot * KEY_ENTRY.size + 8] = b"\0\0\0\0"

    def close(self) -> None:
        self.mm.close()


class QPFile:
    """A QP's shared responder state (see the module docstring)."""

    def __init__(self, path: Path, recv_capacity: int = 0, *, create: bool) -> None:
        ring = _RING_INDEX.size * 2
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self.fd = os.open(path, flags, 0o600)
        if create:
            size = (
                _QP_HEADER_SIZE
                + ring
                + recv_capacity * _RECV_ENTRY.size
                + ring
                + recv_capacity * _INBOUND_ENTRY.size
            )
            os.ftruncate(self.fd, size)
        else:
            size = os.fstat(self.fd).st_size
        self.mm = mmap.mmap(self.fd, size)
        if create:
            self.mm[0:_QP_HEADER_SIZE] = _QP_HEADER.pack(
                0, 0, 0, 0, 0, 0, recv_capacity, 0
            ).ljust(_QP_HEADER_SIZE, b"\0")
        self.capacity = _QP_HEADER.unpack_from(self.mm, 0)[6]
        self._recv_idx = _QP_HEADER_SIZE
        self._recv_base = self._recv_idx + ring
        self._in_idx = self._recv_base + self.capacity * _RECV_ENTRY.size
        self._in_base = self._in_idx + ring

    # header ------------------------------------------------------------------------------------
    def header(self) -> tuple[int, int, int, int, int, int]:
        """(state, pd, access, remote node, remote qpn, max_dest_rd_atomic)."""
        state, pd, access, lo, hi, rqpn, _, rd_atomic = _QP_HEADER.unpack_from(self.mm, 0)
        return state, pd, access, lo | (hi << 32), rqpn, rd_atomic

    def set_header(  # noqa: PLR0917 (the header's fields, in its layout's order)
        self, state: int, pd: int, access: int, rnode: int, rqpn: int, rd_atomic: int
    ) -> None:
        packed = _QP_HEADER.pack(
            state, pd, access, rnode & 0xFFFFFFFF, rnode >> 32, rqpn, self.capacity, rd_atomic
        )
        self.mm[0 : _QP_HEADER.size] = packed

    def state(self) -> int:
        return int(_STATE.unpack_from(self.mm, 0)[0])

    def set_state(self, state: int) -> None:
        _STATE.pack_into(self.mm, 0, state)

    # locking -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            yield None
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def _index(self, where: int) -> int:
        return int(_RING_INDEX.unpack_from(self.mm, where)[0])

    def _set_index(self, where: int, value: int) -> None:
        _RING_INDEX.pack_into(self.mm, where, value)

    # posted receives: owner produces, initiator consumes -------------------------------------
    def recv_outstanding(self) -> int:
        return self._index(self._recv_idx + 8) - self._index(self._recv_idx)

    def push_recv(self, wr_id: int) -> None:
        tail = self._index(self._recv_idx + 8)
        _RECV_ENTRY.pack_into(self.mm, self._recv_base + (tail % self.capacity) * 8, wr_id)
        self._set_index(self._recv_idx + 8, tail + 1)

    def take_recv(self) -> int | None:
        """Consume the oldest posted receive (call under ``locked``); None if there is none."""
        head = self._index(self._recv_idx)
        if head == self._index(self._recv_idx + 8):
            return None
        where = self._recv_base + (head % self.capacity) * _RECV_ENTRY.size
        wr_id = int(_RECV_ENTRY.unpack_from(self.mm, where)[0])
        self._set_index(self._recv_idx, head + 1)
        return wr_id

    # inbound receive completions: initiator produces, owner consumes ------------------------
    def push_inbound(self, wr_id: int, byte_len: int, imm: int, status: int, opcode: int) -> None:
        tail = self._index(self._in_idx + 8)
        where = self._in_base + (tail % self.capacity) * _INBOUND_ENTRY.size
        _INBOUND_ENTRY.pack_into(self.mm, where, wr_id, byte_len, imm, status, opcode, 0)
        self._set_index(self._in_idx + 8, tail + 1)

    def inbound_pending(self) -> int:
        return self._index(self._in_idx + 8) - self._index(self._in_idx)

    def pop_inbound(self) -> tuple[int, int, int, int, int] | None:
        head = self._index(self._in_idx)
        if head == self._index(self._in_idx + 8):
            return None
        where = self._in_base + (head % self.capacity) * _INBOUND_ENTRY.size
        wr_id, byte_len, imm, status, opcode, _ = _INBOUND_ENTRY.unpack_from(self.mm, where)
        self._set_index(self._in_idx, head + 1)
        return wr_id, byte_len, imm, status, opcode

    def reset_rings(self) -> None:
        """Discard posted receives and unread inbound completions (the QP went to RESET)."""
        self._set_index(self._recv_idx, self._index(self._recv_idx + 8))
        self._set_index(self._in_idx, self._index(self._in_idx + 8))

    def close(self) -> None:
        self.mm.close()
        os.close(self.fd)


class NodeDir:
    """A node's directory in the fabric: created by its owner, opened by initiators."""

    def __init__(self, fabric: Path, node_id: int) -> None:
        self.node_id = node_id
        self.path = fabric / f"node-{node_id:012x}"

    @classmethod
    def create(cls, fabric: Path) -> NodeDir:
        """Make a fresh node with a random 48-bit id (``mkdir`` is the atomic claim)."""
        while True:
            fabric.mkdir(parents=True, exist_ok=True)
            node = cls(fabric, secrets.randbits(48) | 1)
            try:
                node.path.mkdir()
            except FileExistsError:
                continue  # another node's id
            except FileNotFoundError:
                continue  # the default fabric's last node removed the folder just now: again
            (node.path / "node").write_text(str(os.getpid()))
            return node

    def owner_pid(self) -> int | None:
        try:
            return int((self.path / "node").read_text())
        except (OSError, ValueError):
            return None

    def remove(self) -> None:
        for child in self.path.iterdir():
            child.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.path.rmdir()
