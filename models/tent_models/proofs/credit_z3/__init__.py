"""z3 proofs of the credit rules: inductive invariants of the sender ledger and receiver allocator.

The rules are encoded here directly from docs/semantics.md#sender-ledger (sender ledger) and §8
(receiver allocator); nothing is imported from the implementation (a proof of the code's own
formulas proves nothing).

Two transition systems, each a set of named state fields, an ``Init`` predicate, named actions
(guard plus effect; every field an action does not assign keeps its value) and named predicates:

* **ledger** — one credit key: the sender's epoch, last sequence and per resource ``grant_total``,
  ``consumed`` and ``returned``, next to the receiver's epoch of the key and what the receiver has
  granted in the sender's epoch. An update message is a *past receiver value*: its grants never
  exceed what the receiver has granted in that epoch by now (cumulative grants only grow).
* **allocator** — two symbolic key+epoch records sharing a capacity per resource, each with a
  lifecycle phase (ACTIVE / FENCING / FENCED), an allocation class (USER or STAGING_INTERNAL) and
  cumulative ``granted``, ``landed``, ``released``, ``reclaimed_return``, ``reclaimed_fence``. The
  usage report's totals are arbitrary (the receiver must be safe against any sender); only the
  receiver's own guards constrain them.

A proof checks the base case (``Init ⇒ Inv``) and, for every action separately, the inductive step
(``Inv ∧ T_action ⇒ Inv'``). A failing step yields a counterexample to induction (CTI): a state
satisfying the candidate invariant and one action instance leading out of it, printed by
:func:`format_cti` in the explicit checker's trace format. Steps whose guard fails (duplicate or
old updates, refused calls) leave the state unchanged and are trivially inductive; they are not
listed as actions.

Integers are unbounded (``Int``) in the proofs: the implementation's checked u64 arithmetic only
*refuses* more steps, so safety over unbounded integers implies safety with the overflow checks.
:func:`bmc_ledger` instead unrolls the ledger from ``Init`` over small bit-vectors, with the
checked-arithmetic guards, for a cross-check against the explicit-state checker.

How to read the package (each module opens with what it holds):

* ``_encoding``: the shared encodings (resources, phases, arithmetics, :class:`_System`), the
  named invariants and the known-bad mutations.
* ``_ledger_rules`` / ``_allocator_rules``: the two transition systems.
* ``_induction``: :func:`check_candidate` and the inductive proofs the registry runs.
* ``_bmc``: :func:`bmc_ledger`.
* ``_results``: the result types, reading a z3 model back, and :func:`format_cti`.
"""

from __future__ import annotations

# Re-exported with ``as`` (not in ``__all__``): the encodings ``ledger_explicit`` and the
# cross-check tests compile from, and the names the single module used to hold.
from tent_models.proofs.credit_z3._allocator_rules import _allocator as _allocator
from tent_models.proofs.credit_z3._bmc import bmc_ledger
from tent_models.proofs.credit_z3._encoding import ACTIVE as ACTIVE
from tent_models.proofs.credit_z3._encoding import (
    ALLOCATOR_INVARIANT,
    ALLOCATOR_MUTATIONS,
    LEDGER_INVARIANT,
    LEDGER_MUTATIONS,
    NON_INDUCTIVE_CANDIDATES,
)
from tent_models.proofs.credit_z3._encoding import FENCED as FENCED
from tent_models.proofs.credit_z3._encoding import FENCING as FENCING
from tent_models.proofs.credit_z3._encoding import KEYS as KEYS
from tent_models.proofs.credit_z3._encoding import RESOURCES as RESOURCES
from tent_models.proofs.credit_z3._encoding import STAGING_INTERNAL as STAGING_INTERNAL
from tent_models.proofs.credit_z3._encoding import USER as USER
from tent_models.proofs.credit_z3._encoding import Expr as Expr
from tent_models.proofs.credit_z3._encoding import Vars as Vars
from tent_models.proofs.credit_z3._encoding import _Action as _Action
from tent_models.proofs.credit_z3._encoding import _BitVecArith as _BitVecArith
from tent_models.proofs.credit_z3._encoding import _IntArith as _IntArith
from tent_models.proofs.credit_z3._encoding import _System as _System
from tent_models.proofs.credit_z3._induction import (
    check_candidate,
    predicate_names,
    prove_allocator_inductive,
    prove_ledger_inductive,
)
from tent_models.proofs.credit_z3._ledger_rules import _ledger as _ledger
from tent_models.proofs.credit_z3._results import BmcResult, ProofResult, format_cti

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
