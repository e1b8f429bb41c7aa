"""Hypothesis strategies for every value and message type of :mod:`tent_credit`.

Every strategy is valid by construction (it never relies on ``assume`` or on a constructor
rejecting a draw) and leans on the boundaries the protocol cares about: 0, 1, the top of each
unsigned range, and session ids on both sides of 2**64 (plain integer vs CBOR bignum).

Import from test modules as ``from strategies import ...`` (``tests/`` is on ``sys.path``
through its ``conftest.py``).
"""

from __future__ import annotations

from hypothesis import strategies as st
from tent_transport.devices.verbs import VerbsEndpoint, VerbsRegion

from tent_credit._arith import U32_MAX, U64_MAX, U128_MAX
from tent_credit._messages import (
    MAX_RESOURCES_PER_MESSAGE,
    MAX_VERSIONS,
    CapabilityActivation,
    CapabilityOffer,
    ControlMessage,
    CreditReturn,
    Heartbeat,
    ReceiverCreditUpdate,
    SenderCreditUsage,
)
from tent_credit._types import CreditAmount, CreditCharge, CreditKey, CreditResource, SessionId

__all__ = [
    "DrawChooser",
    "amount_vectors",
    "capability_activations",
    "capability_offers",
    "control_messages",
    "credit_amounts",
    "credit_charges",
    "credit_keys",
    "credit_resources",
    "credit_returns",
    "heartbeats",
    "protocol_versions",
    "receiver_credit_updates",
    "sender_credit_usages",
    "session_ids",
    "u16s",
    "u32s",
    "u64s",
]

U16_MAX = 0xFFFF


def _uints(top: int) -> st.SearchStrategy[int]:
    """Unsigned integers in [0, top], with the boundaries drawn often."""
    return st.one_of(
        st.sampled_from(sorted({0, 1, top - 1, top})),
        st.integers(min_value=0, max_value=min(top, 1000)),
        st.integers(min_value=0, max_value=top),
    )


def u16s() -> st.SearchStrategy[int]:
    return _uints(U16_MAX)


def u32s() -> st.SearchStrategy[int]:
    return _uints(U32_MAX)


def u64s() -> st.SearchStrategy[int]:
    return _uints(U64_MAX)


def credit_resources() -> st.SearchStrategy[CreditResource]:
    return st.sampled_from(CreditResource)


def session_ids() -> st.SearchStrategy[SessionId]:
    """Non-zero u128 session ids: small, up to u64, and above u64 (a CBOR bignum on the wire)."""
    return st.builds(
        SessionId,
        st.one_of(
            st.sampled_from([1, U64_MAX, U64_MAX + 1, U128_MAX]),
            st.integers(min_value=1, max_value=U64_MAX),
            st.integers(min_value=U64_MAX + 1, max_value=U128_MAX),
        ),
    )


def credit_keys() -> st.SearchStrategy[CreditKey]:
    return st.builds(
        CreditKey, receiver_session=session_ids(), sender_peer=u64s(), qos_class=u32s()
    )


def credit_amounts(*, resource: CreditResource | None = None) -> st.SearchStrategy[CreditAmount]:
    """One ``CreditAmount``; ``resource`` pins the resource (else any)."""
    resources = credit_resources() if resource is None else st.just(resource)
    return st.builds(CreditAmount, resource=resources, amount=u64s())


def amount_vectors() -> st.SearchStrategy[tuple[CreditAmount, ...]]:
    """0..4 amounts with unique resources, in any order (messages keep the order given)."""
    return st.lists(
        credit_amounts(), max_size=MAX_RESOURCES_PER_MESSAGE, unique_by=lambda a: a.resource
    ).map(tuple)


def credit_charges() -> st.SearchStrategy[CreditCharge]:
    """Non-empty charges, unique resources, every amount in (0, 2**64)."""
    return st.dictionaries(
        credit_resources(),
        st.integers(min_value=1, max_value=U64_MAX) | st.sampled_from([1, U64_MAX]),
        min_size=1,
        max_size=len(CreditResource),
    ).map(CreditCharge.of)


def protocol_versions() -> st.SearchStrategy[tuple[int, ...]]:
    """A capability version list: 1..8 unique non-zero u16, any order."""
    version = st.one_of(st.integers(1, 4), st.integers(1, U16_MAX))
    return st.lists(version, min_size=1, max_size=MAX_VERSIONS, unique=True).map(tuple)


def receiver_credit_updates(
    *,
    session: st.SearchStrategy[SessionId] | None = None,
    epochs: st.SearchStrategy[int] | None = None,
    sequences: st.SearchStrategy[int] | None = None,
    qos_classes: st.SearchStrategy[int] | None = None,
) -> st.SearchStrategy[ReceiverCreditUpdate]:
    """Updates; the keyword strategies pin parts of the key (e.g. ``st.just(epoch)``)."""
    return st.builds(
        ReceiverCreditUpdate,
        flags=u16s(),
        qos_class=qos_classes if qos_classes is not None else u32s(),
        receiver_session_id=session if session is not None else session_ids(),
        epoch=epochs if epochs is not None else u64s(),
        sequence=sequences if sequences is not None else u64s(),
        freshness_ttl_ms=u32s(),
        grants=amount_vectors(),
        retry_after_us=u64s(),
    )


def sender_credit_usages() -> st.SearchStrategy[SenderCreditUsage]:
    return st.builds(
        SenderCreditUsage,
        receiver_session_id=session_ids(),
        epoch=u64s(),
        sequence=u64s(),
        qos_class=u32s(),
        consumed_totals=amount_vectors(),
        returned_totals=amount_vectors(),
        pending_demand=amount_vectors(),
    )


def credit_returns() -> st.SearchStrategy[CreditReturn]:
    return st.builds(
        CreditReturn,
        receiver_session_id=session_ids(),
        epoch=u64s(),
        sequence=u64s(),
        qos_class=u32s(),
        returned_totals=amount_vectors(),
    )


def capability_offers() -> st.SearchStrategy[CapabilityOffer]:
    return st.builds(CapabilityOffer, versions=protocol_versions(), qos_class=u32s())


def capability_activations() -> st.SearchStrategy[CapabilityActivation]:
    return st.builds(
        CapabilityActivation,
        versions=protocol_versions(),
        selected_version=u16s(),
        receiver_session_id=session_ids(),
        epoch=u64s(),
        qos_class=u32s(),
        freshness_ttl_ms=u32s(),
    )


def heartbeats() -> st.SearchStrategy[Heartbeat]:
    return st.builds(Heartbeat, receiver_session_id=session_ids(), epoch=u64s(), qos_class=u32s())


def control_messages() -> st.SearchStrategy[ControlMessage]:
    """Any of the six control messages."""
    return st.one_of(
        receiver_credit_updates(),
        sender_credit_usages(),
        credit_returns(),
        capability_offers(),
        capability_activations(),
        heartbeats(),
    )


class DrawChooser:
    """A ``tent_credit.testing.FaultChooser`` whose every choice is a Hypothesis draw.

    Hypothesis then explores (and shrinks) the fault schedule: a shrunk counterexample prefers
    choice 0, which is "no fault" for every yes/no choice of the channel.
    """

    def __init__(self, data: st.DataObject) -> None:
        self._data = data

    def choose(self, what: str, options: int) -> int:
        choice: int = self._data.draw(st.integers(min_value=0, max_value=options - 1), label=what)
        return choice


def verbs_endpoints() -> st.SearchStrategy[VerbsEndpoint]:
    """Valid out-of-band RC endpoints (tent_transport.devices.verbs)."""
    return st.builds(
        VerbsEndpoint,
        qp_num=st.integers(1, (1 << 24) - 1),
        psn=st.integers(0, (1 << 24) - 1),
        gid=st.binary(min_size=16, max_size=16),
        lid=u16s(),
        port_num=st.integers(1, 255),
        mtu=st.integers(1, 5),
    )


def verbs_regions() -> st.SearchStrategy[VerbsRegion]:
    """Valid exposures (tent_transport.devices.verbs): the range fits the 64-bit address space."""
    return st.builds(
        lambda segment, session, offset, length, addr, rkey, readable: VerbsRegion(
            segment=segment,
            session=session,
            offset=min(offset, (1 << 64) - length),
            length=length,
            addr=min(addr, (1 << 64) - length),
            rkey=rkey,
            readable=readable,
        ),
        u64s(),
        st.integers(0, U128_MAX),
        u64s(),
        st.integers(1, 1 << 40),
        u64s(),
        u32s(),
        st.booleans(),
    )
