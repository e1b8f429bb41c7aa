"""What both credit endpoints share: their events and the argument checks and vector helpers
of :mod:`._sender_endpoint` and the receiver side, :mod:`._receiver_endpoint` and
:mod:`._credit_receiver` (the protocol is described in :mod:`._endpoints`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from ._arith import check_u64
from ._describe import describe
from ._types import CreditAmount, CreditResource
from .errors import (
    InvalidArgument,
)

__all__ = ["EndpointEvent"]


# --------------------------------------------------------------------------- events


@attrs.frozen(kw_only=True)
class EndpointEvent:
    """Something an endpoint observed while handling input (past tense ``kind``).

    Kinds: ``activated``, ``legacy_fallback``, ``negotiation_failed``, ``session_fenced``,
    ``fence_drained``, ``grant_applied``, ``update_ignored``, ``became_stale``,
    ``usage_applied``, ``demand_blocked``, ``protocol_violation``.
    """

    kind: str
    detail: str = ""


def _amounts(vector: Mapping[CreditResource, int]) -> tuple[CreditAmount, ...]:
    return tuple([CreditAmount(resource=r, amount=a) for r, a in sorted(vector.items())])


def _nonzero_amounts(vector: Mapping[CreditResource, int]) -> tuple[CreditAmount, ...]:
    return tuple([CreditAmount(resource=r, amount=a) for r, a in sorted(vector.items()) if a])


def _check_now(now_ns: int) -> None:
    check_u64(now_ns, "now_ns")


def _check_peer(sender_peer: int, qos_class: int) -> None:
    check_u64(sender_peer, "sender_peer")
    if type(qos_class) is not int or not 0 <= qos_class <= 0xFFFF_FFFF:
        raise InvalidArgument(f"qos_class must be a u32, got {describe(qos_class)}")


def _check_key_epoch(sender_peer: int, qos_class: int, epoch: int) -> None:
    _check_peer(sender_peer, qos_class)
    check_u64(epoch, "epoch")


def _byte_items(datas: Iterable[bytes]) -> list[bytes]:
    """``datas`` as a list of ``bytes``; :class:`InvalidArgument` for anything else (the
    caller's error, found before any message is applied)."""
    if isinstance(datas, bytes | bytearray | memoryview | str):
        raise InvalidArgument("datas must be an iterable of messages, not one bytes-like value")
    try:
        items = list(datas)
    except TypeError:
        raise InvalidArgument(
            f"datas must be an iterable of bytes, got {describe(datas)}"
        ) from None
    raws: list[bytes] = []
    for item in items:
        if not isinstance(item, bytes | bytearray | memoryview):
            raise InvalidArgument(f"a message must be bytes, got {describe(item)}")
        try:
            raws.append(bytes(item))
        except ValueError:  # a released memoryview
            raise InvalidArgument("a message is a released memoryview") from None
    return raws


def _vector(vector: Mapping[CreditResource, int]) -> dict[int, int]:
    # trace fields: {resource wire value: amount}
    return {int(r): a for r, a in vector.items()}


# --------------------------------------------------------------------------- sender
