"""Sans-IO protocol endpoints: what a transport pumps (docs/design.md#ownership).

Both sides follow aioquic's shape: ``receive_message(data, now_ns)`` feeds bytes in,
``messages_to_send(now_ns)`` returns the bytes to put on the control connection, and
``get_timer()`` / ``handle_timer(now_ns)`` replace internal timers. Nothing here reads a clock,
opens a socket or starts a thread.

Control flow (docs/design.md#protocol-decisions): the sender *pulls* with a ``SenderCreditUsage``
carrying its cumulative consumed / returned totals and its demand; the receiver answers with a
``ReceiverCreditUpdate`` carrying the key's *full* cumulative grant vector, and also *pushes* the
same update when capacity frees for a stalled sender and on its refresh timer. Every total is
cumulative per (session, epoch), so a duplicated, reordered or lost message is harmless: the next
one carries everything.

Demand is sent as an absolute **target grant total** per resource (``pending_demand``): the
receiver grants ``target − granted`` at most, so a duplicated usage report cannot make it grant
twice. Identity (sender peer, QoS class) is bound when the endpoint is constructed for a
connection and never read from a payload: a payload naming another class is a protocol
violation.

The sender side is :mod:`._sender_endpoint`, the receiver side :mod:`._receiver_endpoint` (one
connection) and :mod:`._credit_receiver` (the node), and what both share
:mod:`._endpoint_common`; every name is re-exported here.
"""

from __future__ import annotations

from ._credit_receiver import CreditReceiver
from ._endpoint_common import EndpointEvent
from ._receiver_endpoint import ReceiverEndpoint, ReceiverEndpointStatistics
from ._sender_endpoint import SenderEndpoint, SenderEndpointStatistics

__all__ = [
    "CreditReceiver",
    "EndpointEvent",
    "ReceiverEndpoint",
    "ReceiverEndpointStatistics",
    "SenderEndpoint",
    "SenderEndpointStatistics",
]
