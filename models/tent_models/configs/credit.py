"""Named configurations of the credit spec, its adversarial-sender extension and its known-bad
variants.

``tiny`` is for unit tests (a few thousand states, seconds), ``ci`` is what ``tent check`` runs
exhaustively on every CI run, ``deep`` is for benchmark campaigns. Every factory builds a fresh
spec model (specs keep per-instance memo tables).

:data:`KNOWN_BAD_CONFIGS` gives each known-bad variant of :mod:`tent_spec.variants` the small
bounds under which its counterexample is short; :data:`KNOWN_BAD_EXPECTED` names the invariant
it must violate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tent_spec.credit import CreditBounds, CreditSpec
from tent_spec.credit_adversarial import AdversarialCreditSpec
from tent_spec.variants import KNOWN_BAD

from tent_models.model_api import SpecModel

__all__ = [
    "ADVERSARIAL_BOUNDS",
    "CONFIGS",
    "CREDIT_BOUNDS",
    "KNOWN_BAD_BOUNDS",
    "KNOWN_BAD_CONFIGS",
    "KNOWN_BAD_EXPECTED",
]

# Two resources: index 0 is DATA_BYTES-like, index 1 REQUEST_SLOTS-like. A transfer charges
# both (1, 1); the partial charge (1, 0) makes grants and returns differ per resource, which
# multi-resource atomicity needs in order to matter.
CREDIT_BOUNDS: Mapping[str, CreditBounds] = {
    # One sender, every fault kind, one fault per run: the unit-test model (pairs: `ci`).
    "tiny": CreditBounds(
        senders=1,
        capacity=(1, 1),
        charges=((1, 1),),
        max_grant_total=1,
        max_tokens=1,
        max_epoch=2,
        max_messages=2,
        max_duplications=1,
        max_losses=1,
        max_sender_restarts=1,
        max_receiver_restarts=1,
        max_stale=1,
        max_regressions=1,
        max_faults=1,
    ),
    # Two senders sharing the receiver: duplication, loss, reordering (the bag), a sender
    # restart (epoch fence), a receiver restart (new session) and staleness (TTL expiry: the
    # stale guard of reserve), any two faults per run. 1,984,648 distinct states with symmetry
    # and sequence renumbering (1,266,675 without staleness; measured by BFS).
    "ci": CreditBounds(
        senders=2,
        capacity=(1, 1),
        charges=((1, 1),),
        max_grant_total=1,
        max_tokens=1,
        max_epoch=2,
        max_messages=2,
        max_duplications=1,
        max_losses=1,
        max_sender_restarts=1,
        max_receiver_restarts=1,
        max_stale=1,
        max_faults=2,
    ),
    # Benchmark campaign: partial charges, more capacity, staleness and regressed publishes.
    "deep": CreditBounds(
        senders=2,
        capacity=(2, 1),
        charges=((1, 1), (1, 0)),
        max_grant_total=2,
        max_tokens=2,
        max_epoch=2,
        max_messages=3,
        max_duplications=1,
        max_losses=1,
        max_sender_restarts=1,
        max_receiver_restarts=1,
        max_stale=1,
        max_regressions=1,
    ),
}

# Adversarial senders (issue 10 item 6): every sender may report any return and put any write
# in flight; the receiver admits each write against its credit. No network faults: the lies are
# the faults. `tiny` has one sender (a forged write on top of landed data); `ci` two, so a lie
# re-grants in-flight credit to the other sender (the overfill the write admission stops).
# ci: 131,097 distinct states (measured by BFS; with max_messages=2 it is 480,592).
_SLICES = CreditBounds(
    senders=1,
    capacity=(2, 1),
    charges=((2, 1), (1, 0)),
    max_grant_total=2,
    max_tokens=1,
    max_epoch=1,
    max_messages=1,
)
ADVERSARIAL_BOUNDS: Mapping[str, CreditBounds] = {
    "tiny": CreditBounds(
        senders=1,
        capacity=(1, 1),
        charges=((1, 1),),
        max_grant_total=1,
        max_tokens=1,
        max_epoch=2,
        max_messages=2,
    ),
    "ci": CreditBounds(
        senders=2,
        capacity=(1, 1),
        charges=((1, 1),),
        max_grant_total=1,
        max_tokens=1,
        max_epoch=2,
        max_messages=1,
    ),
    # Issue 27 item 1: an honest transfer is two bytes and one slot, (2, 1); a charge without
    # a slot, (1, 0), is a transfer's non-last slice, which a liar forges on its own to open a
    # transfer per byte of its grant; invariant held_transfers_within_slot_credit.
    "slices/ci": _SLICES,
}

# One sender suffices for every counterexample; each variant gets the faults its rule guards
# against (and nothing else, so the search stays small).
_BAD_BASE: dict[str, Any] = {
    "senders": 1,
    "capacity": (1, 1),
    "charges": ((1, 1), (1, 0)),
    "max_grant_total": 1,
    "max_tokens": 1,
    "max_epoch": 2,
    "max_messages": 2,
}
KNOWN_BAD_BOUNDS: Mapping[str, CreditBounds] = {
    "delta_grants": CreditBounds(**_BAD_BASE),
    "equal_sequence_accepted": CreditBounds(**_BAD_BASE, max_duplications=1, max_stale=1),
    "no_decreasing_grant_check": CreditBounds(**_BAD_BASE, max_regressions=1),
    "no_epoch_fence_on_restart": CreditBounds(**_BAD_BASE, max_sender_restarts=1),
    "partial_reserve": CreditBounds(**_BAD_BASE),
    "control_charged_to_data_credit": CreditBounds(**_BAD_BASE),
    "completion_mints_credit": CreditBounds(**_BAD_BASE),
    "reuse_before_fence": CreditBounds(**_BAD_BASE, max_sender_restarts=1),
    # (2, 1): more bytes than the one slot's grant, which only the credit check refuses
    "no_write_admission": CreditBounds(**{**_BAD_BASE, "charges": ((1, 1), (2, 1))}),
    "no_transfer_bound": _SLICES,  # two slot-less writes within the byte grant, one slot
    "stale_reserve": CreditBounds(**_BAD_BASE, max_stale=1),
}
assert KNOWN_BAD_BOUNDS.keys() == KNOWN_BAD.keys()


def _credit(level: str) -> Callable[[], SpecModel[Any]]:
    def build() -> SpecModel[Any]:
        return CreditSpec(CREDIT_BOUNDS[level], name=f"credit/{level}")

    return build


def _known_bad(variant: str) -> Callable[[], SpecModel[Any]]:
    factory = KNOWN_BAD[variant][0]

    def build() -> SpecModel[Any]:
        return factory(KNOWN_BAD_BOUNDS[variant], name=f"known-bad/{variant}")

    return build


def _adversarial(level: str) -> Callable[[], SpecModel[Any]]:
    def build() -> SpecModel[Any]:
        return AdversarialCreditSpec(ADVERSARIAL_BOUNDS[level], name=f"adversarial/{level}")

    return build


CONFIGS: Mapping[str, Callable[[], SpecModel[Any]]] = {
    **{f"credit/{level}": _credit(level) for level in CREDIT_BOUNDS},
    **{f"adversarial/{level}": _adversarial(level) for level in ADVERSARIAL_BOUNDS},
}
"""Model name -> factory of a fresh spec model under that configuration."""

KNOWN_BAD_CONFIGS: Mapping[str, Callable[[], SpecModel[Any]]] = {
    name: _known_bad(name) for name in KNOWN_BAD
}
"""Known-bad variant name -> factory of the variant under its small configuration."""

KNOWN_BAD_EXPECTED: Mapping[str, str] = {name: entry[1] for name, entry in KNOWN_BAD.items()}
"""Known-bad variant name -> the invariant its counterexample must violate."""
