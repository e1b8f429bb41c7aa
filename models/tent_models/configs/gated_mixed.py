"""Gated-queue configurations whose owners on one key have charges of different sizes
(docs/credit_protocol.md#mixed-charges), merged into :mod:`tent_models.configs.gated`.

A version-2 receiver grants a key in whole *units*: its stated level over the gcd of the
level's amounts. A key whose waiting work mixes sizes, a one-byte and a two-byte write say,
has the level ``(3, 2, 2)``, whose unit is the whole level: more than the capacity, so it was
never granted ahead and waited for good (before 7 December 2026; in the engine a sender whose
transfers were not all one size stalled). Report rule 4 states a waiting key's level in whole
charges of its head (the first credit-stalled owner), and a lower level whose unit changed is
news then; a refused submit that leaves credit the head cannot use gives all of it back, and
the receiver takes a newer report's consumption as it is (a rollback lowers it).

* ``gated/mixed/ci`` (:func:`mixed_config`): two keys on two bytes of capacity; key 2 has a
  two-byte owner and then a one-byte one, key 1 a one-byte owner.
* ``gated/mixed_rollback/ci`` (:func:`rollback_config`): one key, two one-byte owners and a
  two-byte one: a refused one-byte submit (the receiver still counts it in flight unless the
  next report's lower consumption is taken as it is).
* ``gated/bad/level_not_in_heads`` (:class:`LevelNotInHeads`): the sender states its plain
  level and a lower level is never news; a two-byte owner behind a one-byte one waits for good
  (recoverability).
* ``gated/fragments/ci`` (:func:`fragments_config`): two keys on two bytes of capacity,
  one-byte activation grants; key 1 has a two-byte owner and then a one-byte one, key 2 a
  two-byte owner. Both keys start with a fragment of their head's charge and nothing free
  (hold and wait); report rule 5 returns them (docs/credit_protocol.md#uncovered-credit).
* ``gated/bad/holds_fragments`` (:class:`HoldsFragments`): the sender keeps credit that does not
  cover its head (before 7 December 2026). Two keys, a two-byte owner each, one-byte activation
  grants filling two bytes of capacity (:func:`held_fragments_config`): both keys wait for each
  other from the initial state (recoverability).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tent_spec.gated import GatedConfig, GatedSpec, OwnerSpec

__all__ = [
    "CONFIGS",
    "KNOWN_BAD",
    "HoldsFragments",
    "LevelNotInHeads",
    "fragments_config",
    "head_last_config",
    "held_fragments_config",
    "mixed_config",
    "rollback_config",
]


def _on_two_bytes(name: str, keys: int, *owners: OwnerSpec) -> GatedConfig:
    """``owners`` on two bytes of capacity (and of ``max_grant``), one-byte activation grants,
    every owner in one pick, no refresh and no fault."""
    total = sum(o.length for o in owners)
    return GatedConfig(
        name=name,
        keys=keys,
        workload=owners,
        max_outstanding_owners=len(owners),
        max_outstanding_bytes=total,
        windows=((len(owners), total),),
        capacity=(2, 2, 2),
        max_grant=(2, 2, 2),
        initial_grant=(1, 1, 1),
        refresh=False,
        max_messages=2,
    )


def mixed_config() -> GatedConfig:
    """Key 1: a one-byte owner; key 2: a two-byte owner, then a one-byte one."""
    return _on_two_bytes("gated/mixed/ci", 2, OwnerSpec(1, 1), OwnerSpec(2, 2), OwnerSpec(2, 1))


def rollback_config() -> GatedConfig:
    """One key: two one-byte owners, then a two-byte one."""
    return _on_two_bytes(
        "gated/mixed_rollback/ci", 1, OwnerSpec(1, 1), OwnerSpec(1, 1), OwnerSpec(1, 2)
    )


def head_last_config() -> GatedConfig:
    """One key: a two-byte owner, then a one-byte one (the known-bad's model)."""
    return _on_two_bytes("gated/bad/level_not_in_heads", 1, OwnerSpec(1, 2), OwnerSpec(1, 1))


def fragments_config() -> GatedConfig:
    """Key 1: a two-byte owner, then a one-byte one; key 2: a two-byte owner. Both activation
    grants are fragments of a head and fill the capacity."""
    return _on_two_bytes("gated/fragments/ci", 2, OwnerSpec(1, 2), OwnerSpec(1, 1), OwnerSpec(2, 2))


def held_fragments_config() -> GatedConfig:
    """Two keys, a two-byte owner each, on two bytes of capacity (the known-bad's model)."""
    return _on_two_bytes("gated/bad/holds_fragments", 2, OwnerSpec(1, 2), OwnerSpec(2, 2))


class LevelNotInHeads(GatedSpec):
    """Mutant: the sender states its plain level (in flight plus waiting) and a lower level
    is never news (the sender before 7 December 2026)."""

    def states_in_heads(self) -> bool:
        return False


class HoldsFragments(GatedSpec):
    """Mutant: the sender keeps credit on hand that does not cover its head's charge (report
    rule 5 is gone; the sender before 7 December 2026)."""

    def returns_uncovered(self) -> bool:
        return False


CONFIGS: Mapping[str, Callable[[], GatedSpec]] = {
    "gated/mixed/ci": lambda: GatedSpec(mixed_config()),
    "gated/mixed_rollback/ci": lambda: GatedSpec(rollback_config()),
    "gated/fragments/ci": lambda: GatedSpec(fragments_config()),
}

KNOWN_BAD: Mapping[str, tuple[Callable[[], GatedSpec], str]] = {
    "gated/bad/level_not_in_heads": (
        lambda: LevelNotInHeads(head_last_config()),
        "recoverability",
    ),
    "gated/bad/holds_fragments": (
        lambda: HoldsFragments(held_fragments_config()),
        "recoverability",
    ),
}
