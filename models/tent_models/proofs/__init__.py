"""z3 proofs: inductive invariants and bounded model checking of the credit protocol rules."""

from __future__ import annotations

from .credit_z3 import (
    ALLOCATOR_INVARIANT,
    ALLOCATOR_MUTATIONS,
    LEDGER_INVARIANT,
    LEDGER_MUTATIONS,
    NON_INDUCTIVE_CANDIDATES,
    BmcResult,
    ProofResult,
    bmc_ledger,
    check_candidate,
    format_cti,
    predicate_names,
    prove_allocator_inductive,
    prove_ledger_inductive,
)

__all__ = [
    "ALLOCATOR_INVARIANT",
    "ALLOCATOR_MUTATIONS",
    "LEDGER_INVARIANT",
    "LEDGER_MUTATIONS",
    "NON_INDUCTIVE_CANDIDATES",
    "BmcResult",
    "ProofResult",
    "bmc_ledger",
    "check_candidate",
    "format_cti",
    "predicate_names",
    "prove_allocator_inductive",
    "prove_ledger_inductive",
]
