"""The harness's own pieces: a :class:`FaultyChannel` with the harness's view of its contents,
the work the harness transport carries, the per-sender and per-connection slots, and the vector
helpers that read implementation mappings in spec resource order.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from tent_credit import (
    CreditResource,
    ReceiverEndpoint,
    ReservationToken,
    SenderEndpoint,
)
from tent_credit.testing import FaultyChannel
from tent_models.conformance._lockstep import ConformanceFailure
from tent_models.conformance.credit._model import RESOURCES


class _Channel:
    """A :class:`FaultyChannel` (no random faults) plus the harness's view of its contents.

    The view lists ``(due_ns, serial, bytes)`` in the channel's documented pending order, so a
    spec message maps to the channel index ``i`` of ``deliver_one`` / ``drop_at`` /
    ``duplicate_at``; every delivery checks that the channel returned the bytes the view names.
    """

    def __init__(self) -> None:
        self.channel = FaultyChannel()
        self.view: list[tuple[int, int, bytes]] = []
        self._serial = 0

    def send(self, data: bytes, now_ns: int) -> None:
        self.channel.send(data, now_ns)
        self._add(now_ns, data)

    def _add(self, due_ns: int, data: bytes) -> None:
        bisect.insort(self.view, (due_ns, self._serial, data))
        self._serial += 1

    def deliver(self, i: int, now_ns: int) -> bytes:
        data = self.channel.deliver_one(i, now_ns)
        _due, _serial, expected = self.view.pop(i)
        if data != expected:
            raise ConformanceFailure("the channel delivered other bytes than the harness expected")
        return data

    def drop(self, i: int) -> None:
        self.channel.drop_at(i)
        self.view.pop(i)

    def duplicate(self, i: int) -> None:
        self.channel.duplicate_at(i)
        due, _serial, data = self.view[i]
        self._add(due, data)

    def contents(self) -> list[bytes]:
        return [data for _due, _serial, data in self.view]


@attrs.define
class _Work:
    """Committed work the harness transport carries (spec ``inflight``)."""

    session: int
    epoch: int
    charge: int
    token: ReservationToken
    process: SenderEndpoint  # the sender process that committed it


@attrs.define
class _SenderSlot:
    """One spec sender: its current process and what the harness knows about it."""

    endpoint: SenderEndpoint
    clock: int
    down: _Channel  # receiver -> sender (replaced with the connection)
    up: _Channel  # sender -> receiver (survives a sender restart: old reports may still arrive)
    tokens: list[tuple[ReservationToken, int]] = attrs.Factory(list)  # (token, charge index)
    heartbeats: list[bytes] = attrs.Factory(list)
    dirty: bool = False  # mirrors "something changed since the last usage report"
    usage_seq: int = 0  # last usage sequence put on the wire for the live entry
    was_stale: bool = False  # history: stale since the live entry began (REVIVED mark)
    stale_at: int = 0  # history: implementation sequence when it last became stale


@attrs.define
class _ReceiverSlot:
    """The receiver's endpoint for one spec sender (one connection = one epoch)."""

    endpoint: ReceiverEndpoint
    clock: int = 0
    last_grants: tuple[int, ...] | None = None  # totals of the last update it emitted
    usage_seq: int = 0  # last usage sequence it accepted
    demand: int = 0  # ghost: the spec demand of that usage


def _vector(mapping: Mapping[CreditResource, int], n: int) -> tuple[int, ...]:
    return tuple(mapping.get(RESOURCES[r], 0) for r in range(n))


def _amounts_vector(amounts: Iterable[Any], n: int) -> tuple[int, ...]:
    values = {a.resource: a.amount for a in amounts}
    return tuple(values.get(RESOURCES[r], 0) for r in range(n))


def _bag(messages: Iterable[Any]) -> tuple[tuple[Any, int], ...]:
    counts: dict[Any, int] = {}
    for m in messages:
        counts[m] = counts.get(m, 0) + 1
    return tuple(sorted(counts.items()))
