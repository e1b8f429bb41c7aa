"""Request merging (``merge_requests``): contiguous requests of one submit become one owner.

The reference's ``mergeRequests`` (TENT ``transfer_engine_impl.cpp``) sorts a submit's requests
and folds each into the previous one when both ranges continue it. Here two requests of one
submit merge when, in remote-offset order:

1. both are USER, DIRECT (a staged write must fit one slice) WRITEs or READs of the same
   opcode, to the same peer and remote segment, with the same QoS class (``None`` resolved to
   the default), deadline, priority and intent;
2. the remote range of the second starts where the first's ends, and so does its local range,
   in the same exporter's memory (the same ``memoryview.obj``);
3. their total stays within ``limit`` (the runtime queue's ``max_dispatch_bytes``: a longer
   owner would be refused at admission).

A merged owner keeps every request's identity: its transfer is cut request by request (each
request lands as its own write(s), with its own data-landed notification and CONSUMER_SLOTS),
and its credit charge is the sum of its requests' charges (``DispatchContext.requests``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import attrs

from tent_sched import OwnerKind

from ..devices._base import Opcode
from ._types import TransferPlan, TransferRequest

__all__ = ["Merged", "merge"]


class _PyBuffer(ctypes.Structure):
    """CPython's ``Py_buffer`` (its layout is part of the stable ABI)."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


_GET_BUFFER = ctypes.pythonapi.PyObject_GetBuffer
_GET_BUFFER.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_GET_BUFFER.restype = ctypes.c_int
_RELEASE_BUFFER = ctypes.pythonapi.PyBuffer_Release
_RELEASE_BUFFER.argtypes = [ctypes.POINTER(_PyBuffer)]
_RELEASE_BUFFER.restype = None


def _address(view: memoryview) -> int:
    """Where ``view``'s first byte lives (read-only buffers too: ``ctypes.from_buffer`` cannot)."""
    buffer = _PyBuffer()
    _GET_BUFFER(view, ctypes.byref(buffer), 0)  # PyBUF_SIMPLE; a failure raises its error
    try:
        return int(buffer.buf or 0)
    finally:
        _RELEASE_BUFFER(ctypes.byref(buffer))


@attrs.frozen
class Merged:
    """One owner of a submit: ``request`` (the merged one, or the request itself) and the
    submit positions of the requests it carries, in remote-offset order."""

    request: TransferRequest
    indices: tuple[int, ...]


def _key(request: TransferRequest, default_qos: int) -> tuple[object, ...] | None:
    if request.kind is not OwnerKind.USER or request.plan is not TransferPlan.DIRECT:
        return None
    qos = default_qos if request.qos_class is None else request.qos_class
    return (
        request.opcode is Opcode.READ,
        request.peer,
        request.remote_segment,
        qos,
        request.deadline_ns,
        request.priority,
        int(request.intent_type),  # an int, as every part of the key: the keys are sorted
        id(request.local.obj),
    )


def merge(
    requests: Sequence[TransferRequest], *, default_qos: int, limit: int | None
) -> list[Merged]:
    """The owners of a submit (module docstring), ordered by the first submit position each
    carries; a request that merges with none is an owner of its own."""
    runs: list[list[int]] = []
    keyed: list[tuple[tuple[object, ...], int, int, int]] = []
    for index, request in enumerate(requests):
        key = _key(request, default_qos)
        if key is None:
            runs.append([index])
        else:
            keyed.append((key, request.remote_offset, _address(request.local), index))
    keyed.sort(key=lambda item: item[:3])  # the reference's order: key, target, source
    previous: tuple[tuple[object, ...], int, int, int] | None = None
    total = 0
    for item in keyed:
        key, offset, address, index = item
        length = requests[index].length
        if (
            previous is not None
            and previous[0] == key
            and previous[1] + requests[previous[3]].length == offset
            and previous[2] + requests[previous[3]].length == address
            and (limit is None or total + length <= limit)
        ):
            runs[-1].append(index)
            total += length
        else:
            runs.append([index])
            total = length
        previous = item
    out: list[Merged] = []
    for run in runs:
        out.extend(_owner(requests, run))
    out.sort(key=lambda merged: min(merged.indices))
    return out


def _owner(requests: Sequence[TransferRequest], run: list[int]) -> list[Merged]:
    first = requests[run[0]]
    if len(run) == 1:
        return [Merged(first, (run[0],))]
    length = sum(requests[i].length for i in run)
    try:
        base = memoryview(first.local.obj).cast("B")
    except TypeError:  # an exporter whose whole buffer is not one flat run of bytes
        return [Merged(requests[i], (i,)) for i in run]
    start = _address(first.local) - _address(base)
    local = base[start : start + length]
    return [Merged(attrs.evolve(first, local=local, length=length), tuple(run))]
