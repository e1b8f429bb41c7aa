"""Write admission and quarantine conform to the adversarial spec (issue 10 item 6)."""

from __future__ import annotations

import random

import attrs
import pytest
from tent_models.configs import ADVERSARIAL_BOUNDS
from tent_models.conformance.write_admission import (
    WriteAdmissionDivergence,
    WriteAdmissionLockstep,
)

from tent_credit import EpochState, ReceiverCreditAllocator, TransferBook, WriteAdmission

BOUNDS = attrs.evolve(
    ADVERSARIAL_BOUNDS["ci"],
    max_messages=2,
    max_grant_total=2,
    max_sender_restarts=1,
    max_receiver_restarts=1,
    max_duplications=1,
    max_faults=2,
)
SLICES = ADVERSARIAL_BOUNDS["slices/ci"]


@pytest.mark.parametrize("seed", range(8))
def test_random_walks_of_liars_and_honest_senders_conform(seed: int) -> None:
    rng = random.Random(seed)
    refused = landed = 0
    for _walk in range(25):
        lockstep = WriteAdmissionLockstep(BOUNDS)
        lockstep.random_walk(rng, 60)
        refused += sum(1 for a, _ in lockstep.trace if a == "refuse_write")
        landed += sum(1 for a, _ in lockstep.trace if a == "data_lands")
    assert refused > 0 and landed > 0  # both halves of the admission were exercised


def test_an_admission_without_the_credit_check_diverges(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lockstep can fail: an allocator that lets every write of a live epoch land."""
    original = ReceiverCreditAllocator.admit_write

    def trusting(
        self: ReceiverCreditAllocator, sender: int, qos: int, epoch: int, amounts: object
    ) -> WriteAdmission:
        record = self._records.get((sender, qos, epoch))
        if record is None or record.state is EpochState.FENCED or not isinstance(amounts, dict):
            return original(self, sender, qos, epoch, amounts)
        landed = {r: v + amounts.get(r, 0) for r, v in record.landed.items()}
        self._commit((sender, qos, epoch), attrs.evolve(record, landed=landed))
        return WriteAdmission(accepted=True)

    monkeypatch.setattr(ReceiverCreditAllocator, "admit_write", trusting)
    rng = random.Random(1)
    # with charges that carry a slot, the transfer bound (checked first) refuses every write
    # past its credit too; slot-less ones (SLICES) reach the credit check alone
    with pytest.raises(WriteAdmissionDivergence, match="admit_write of"):
        for _walk in range(200):
            WriteAdmissionLockstep(SLICES).random_walk(rng, 60)


@pytest.mark.parametrize("seed", range(4))
def test_random_walks_of_slice_forging_liars_conform_with_the_transfer_bound(seed: int) -> None:
    """Issue 27 item 1: slot-less forged writes; the allocator with the transfer book and the
    adversarial spec agree on every write, every refusal and every transfer held."""
    rng = random.Random(seed)
    refused_by_bound = landed = 0
    for _walk in range(25):
        lockstep = WriteAdmissionLockstep(SLICES)
        lockstep.random_walk(rng, 60)
        landed += sum(1 for a, _ in lockstep.trace if a == "data_lands")
        refused_by_bound += lockstep.bound_refusals
    assert landed > 0 and refused_by_bound > 0  # the bound refused, and writes landed


def test_a_transfer_book_without_its_bound_diverges(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lockstep can fail: a receiver that opens a transfer for every slot-less write."""
    monkeypatch.setattr(TransferBook, "may_open", lambda self, peer, qos, epoch: True)
    rng = random.Random(1)
    with pytest.raises(WriteAdmissionDivergence, match=r"admit_write of|transfers held"):
        for _walk in range(200):
            WriteAdmissionLockstep(SLICES).random_walk(rng, 60)
