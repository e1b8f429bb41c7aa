"""Named configurations of the gated-queue spec (:mod:`tent_spec.gated`) and its known-bad variants.

``CONFIGS`` maps a model name to a factory of a ready model (``tent check`` and the tests call
the factory). Vectors are ``(DATA_BYTES, REQUEST_SLOTS, CONSUMER_SLOTS)``; a remote owner of
length ``L`` charges ``(L, 1, 1)``.

* ``gated/tiny``: one key, a remote owner of 2 bytes behind an activation grant of one byte (a
  fragment of its charge: it stalls, returns the fragment with the report of its level, the
  receiver grants a whole charge, it dispatches) and a local owner; one fault of any kind
  (loss, duplication, receiver restart). The bags hold two messages: room for both refreshes.
* ``gated/ci``: two keys (QoS classes) sharing the receiver's capacity, one owner each, no
  initial grant (every owner stalls, asks and is granted), and a receiver restart at any
  point. Loss and duplication are ``gated/tiny``'s
  (the credit spec's models combine them with two senders); all three on two keys exceed the
  CI budget of this Python checker.
* ``gated/hoarding/ci`` (:func:`hoarding_config`): ``gated/ci`` with one owner's worth of
  capacity, no restart, and queued owners that may be canceled (an environment action, so
  recoverability is asked with cancels off). A key granted that capacity whose owner then
  leaves without using it (a refused submit, a cancel, before or after the grant arrived)
  must give it back, or the other key stalls for good (issue 10 item 8): recoverability holds
  because the gate returns idle credit (``GatedSpec.return_idle``). Without the return path
  (``gated/bad/no_idle_return``, on the same model without cancels) the checker finds the
  8-step counterexample of docs/spec_review_gated.md.
* ``gated/three/ci`` (:func:`three_config`): one key, three owners of one byte, two bytes of
  capacity, no refresh and no fault. Three owners give the key a level above its hold
  (capped, quantum 2), so a head can be short of its quantum while its own landed data holds
  the rest (the receiver grants it what is free), and two refused submits can return their
  credit while the third owner waits: the receiver must evaluate the key again when it
  reclaims those returns (before 7 December 2026 it did not, and that owner waited for
  good: the recoverability counterexample this model found). ``gated/partial_hold/ci``: the same
  with ``hold_partial``, the short head waiting for its own release or the timer
  (``grant_partial``; docs/credit_protocol.md#partial-hold).
* ``gated/bad/no_refresh`` (:func:`no_refresh_config`): ``gated/tiny`` with neither refresh and
  loss as the only fault. Version 2 sends no frame without news, so a lost update (or report)
  is never repeated: the key stalls for good, a recoverability counterexample. The refreshes
  are what makes "no repeats" safe under loss.
* ``gated/bad/returns_not_evaluated`` (:class:`ReturnsNotEvaluated`): ``gated/three/ci`` with
  the receiver that served the line on reclaimed returns without evaluating the key: the
  recoverability counterexample above.
* ``gated/mixed/ci``, ``gated/mixed_rollback/ci`` and ``gated/bad/level_not_in_heads``: owners
  of different sizes on one key (:mod:`tent_models.configs.gated_mixed`).
* ``gated/bad/line_passes_blocked_head`` and ``gated/bad/line_serves_last_come``
  (:func:`line_config`): two keys with charges of different sizes; a line that lets a younger
  key pass a head that cannot be served, or that serves the last comer first, passes a waiting
  key more than once: ``bounded_bypass`` refutes both.

``KNOWN_BAD`` maps a mutant name to ``(factory, invariant it must violate)``: each changes one
policy hook of :class:`~tent_spec.gated.GatedSpec` and the checker must refute it
(``"recoverability"`` names the liveness check instead of an invariant).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import attrs
from tent_spec.gated import GatedConfig, GatedSpec, GatedState, OwnerSpec, SenderKey

from tent_models.configs import gated_mixed

__all__ = [
    "CONFIGS",
    "KNOWN_BAD",
    "BlockedRequeuedAtBack",
    "ControlChargedToDataCredit",
    "LinePassesBlockedHead",
    "LineServesLastCome",
    "NoIdleReturn",
    "NoSnapshotCheck",
    "PartialReserve",
    "ReturnsNotEvaluated",
    "ci_config",
    "hoarding_config",
    "idle_config",
    "line_config",
    "no_refresh_config",
    "three_config",
    "tiny_config",
]


def tiny_config() -> GatedConfig:
    """One key: owner 1 (2 bytes) is remote and starts short of data credit, owner 2 is local."""
    return GatedConfig(
        name="gated/tiny",
        keys=1,
        workload=(OwnerSpec(1, 2), OwnerSpec(0, 1)),
        max_outstanding_owners=2,
        max_outstanding_bytes=3,
        windows=((2, 3),),
        capacity=(2, 2, 2),
        max_grant=(2, 2, 2),
        initial_grant=(1, 1, 1),
        refresh=True,
        max_messages=2,
        max_duplications=1,
        max_losses=1,
        max_receiver_restarts=1,
        max_faults=1,
    )


def ci_config() -> GatedConfig:
    """Two keys (QoS classes) sharing the receiver's capacity, no initial grant, one owner per
    key, and a receiver restart at any point."""
    return GatedConfig(
        name="gated/ci",
        keys=2,
        workload=(OwnerSpec(1, 1), OwnerSpec(2, 1)),
        max_outstanding_owners=2,
        max_outstanding_bytes=2,
        windows=((2, 2),),
        capacity=(2, 2, 2),
        max_grant=(1, 1, 1),
        initial_grant=(0, 0, 0),
        refresh=True,
        max_messages=2,
        max_receiver_restarts=1,
    )


def hoarding_config(*, cancel: bool = True) -> GatedConfig:
    """``gated/ci`` with one owner's worth of capacity and no restart: the keys compete for it,
    and (``cancel``) a queued owner may be canceled at any point."""
    return attrs.evolve(
        ci_config(),
        name="gated/hoarding/ci" if cancel else "gated/hoarding/no_cancel",
        capacity=(1, 1, 1),
        max_grant=(1, 1, 1),
        max_receiver_restarts=0,
        cancel=cancel,
    )


def three_config(*, hold_partial: bool = False) -> GatedConfig:
    """One key, three one-byte owners, two bytes of capacity (module docstring)."""
    return GatedConfig(
        name="gated/partial_hold/ci" if hold_partial else "gated/three/ci",
        keys=1,
        workload=(OwnerSpec(1, 1), OwnerSpec(1, 1), OwnerSpec(1, 1)),
        max_outstanding_owners=3,
        max_outstanding_bytes=3,
        windows=((3, 3),),
        capacity=(2, 2, 2),
        max_grant=(2, 2, 2),
        initial_grant=(1, 1, 1),
        refresh=False,
        max_messages=2,
        hold_partial=hold_partial,
    )


def no_refresh_config() -> GatedConfig:
    """``gated/tiny`` without the refreshes and with loss as the only fault."""
    return attrs.evolve(
        tiny_config(),
        name="gated/bad/no_refresh",
        refresh=False,
        max_duplications=0,
        max_receiver_restarts=0,
    )


CONFIGS: Mapping[str, Callable[[], GatedSpec]] = {
    "gated/tiny": lambda: GatedSpec(tiny_config()),
    "gated/ci": lambda: GatedSpec(ci_config()),
    "gated/hoarding/ci": lambda: GatedSpec(hoarding_config()),
    "gated/three/ci": lambda: GatedSpec(three_config()),
    "gated/partial_hold/ci": lambda: GatedSpec(three_config(hold_partial=True)),
    **gated_mixed.CONFIGS,  # owners of different sizes on one key
}


# --- known-bad variants: one policy hook changed each ---------------------------------------------


class PartialReserve(GatedSpec):
    """Mutant: the gate reserves resource by resource (the slots first, then the data bytes); a
    short resource blocks the owner but the resources reserved before it stay consumed."""

    def reserve(self, ledger: SenderKey, charge: tuple[int, ...]) -> tuple[SenderKey, bool]:
        consumed = list(ledger.consumed)
        for r in reversed(range(len(charge))):
            amount = charge[r]
            if amount > ledger.grant_total[r] - consumed[r] - ledger.returned[r]:
                return ledger._replace(consumed=tuple(consumed)), False
            consumed[r] += amount
        return ledger._replace(consumed=tuple(consumed)), True


class BlockedRequeuedAtBack(GatedSpec):
    """Mutant: a blocked owner is moved to the back of the queue (its enqueue order is lost)."""

    def requeue_blocked(self, queue: tuple[int, ...], blocked: Sequence[int]) -> tuple[int, ...]:
        kept = tuple(i for i in queue if i not in blocked)
        return kept + tuple(i for i in queue if i in blocked)


class NoSnapshotCheck(GatedSpec):
    """Mutant: the gate never compares the owner's snapshot with the key's current session, so
    an owner admitted before a receiver restart spends the new session's credit."""

    def snapshot_fenced(self, owner: object, ledger: SenderKey) -> bool:
        del owner, ledger
        return False


class ControlChargedToDataCredit(GatedSpec):
    """Mutant: a usage report needs a free REQUEST_SLOTS credit, as if control were data."""

    def control_needs_credit(self, ledger: SenderKey) -> bool:
        return self.available(ledger)[1] < 1


class NoIdleReturn(GatedSpec):
    """Mutant: the gate never gives idle credit back (the return path of issue 10 item 8 is
    gone; demand is still lowered), so a key whose owner left keeps the receiver's capacity."""

    def idle_credit(self, state: GatedState, key: int) -> tuple[int, ...]:
        del state, key
        return (0, 0, 0)


class ReturnsNotEvaluated(GatedSpec):
    """Mutant: reclaimed returns serve the line without evaluating the key that returned them
    (the receiver before 7 December 2026): a key whose level stayed the same is never due
    again, and its waiting owner stalls for good."""

    def evaluate_on_return(self) -> bool:
        return False


class LinePassesBlockedHead(GatedSpec):
    """Mutant: a head of the receiver's line that cannot be served does not stop the pass; a
    younger due key whose (smaller) top-up fits is served past it."""

    def head_blocks_the_line(self) -> bool:
        return False


class LineServesLastCome(GatedSpec):
    """Mutant: a key that becomes due joins the front of the line (last come, first served)."""

    def join_line(self, line: tuple[int, ...], k: int) -> tuple[int, ...]:
        return (k, *line)


def line_config() -> GatedConfig:
    """Two keys share capacity 2: key 1's owner writes 2 bytes (a charge ``(2, 1, 1)``), key
    2's two owners 1 byte each; no fault. Key 2's top-ups fit where key 1's does not."""
    return GatedConfig(
        name="gated/bad/line",
        keys=2,
        workload=(OwnerSpec(2, 1), OwnerSpec(1, 2), OwnerSpec(2, 1)),
        max_outstanding_owners=3,
        max_outstanding_bytes=4,
        windows=((3, 4),),
        capacity=(2, 2, 2),
        max_grant=(2, 2, 2),
        initial_grant=(0, 0, 0),
        refresh=False,
        max_messages=2,
    )


def idle_config() -> GatedConfig:
    """Two keys share capacity 2 and each holds an activation grant of one byte; key 1's owner
    has one byte, key 2's two: it needs the byte key 1 holds. If key 1's owner leaves without
    using it (a refused submit) before key 1 ever reported, only the gate's return gives it
    back (version 2's sender returns idle credit itself only after its first report: the
    activation's grant is not idle before it). Until 7 December 2026 key 2 had two one-byte
    owners; the counterexample found there was in truth the receiver's missing evaluation of
    reclaimed returns (``gated/bad/returns_not_evaluated``), and with it fixed key 2's own
    returned byte served its second owner: a two-byte owner needs key 1's byte whatever key 2
    returns."""
    return GatedConfig(
        name="gated/bad/no_idle_return",
        keys=2,
        workload=(OwnerSpec(1, 1), OwnerSpec(2, 2)),
        max_outstanding_owners=3,
        max_outstanding_bytes=3,
        windows=((3, 3),),
        capacity=(2, 2, 2),
        max_grant=(2, 2, 2),
        initial_grant=(1, 1, 1),
        refresh=False,
        max_messages=2,
    )


def _reversal_config() -> GatedConfig:
    """Key 1 blocks owner 1 while a local owner 2 dispatches behind it, then owner 3 queues."""
    return GatedConfig(
        name="gated/bad/blocked_requeued_at_back",
        keys=1,
        workload=(OwnerSpec(1, 2), OwnerSpec(0, 1), OwnerSpec(1, 1)),
        max_outstanding_owners=3,
        max_outstanding_bytes=4,
        windows=((2, 3),),
        capacity=(2, 2, 2),
        max_grant=(2, 2, 2),
        initial_grant=(1, 1, 1),
        max_messages=2,
    )


def _restart_config() -> GatedConfig:
    """One remote owner and a receiver restart, no other fault."""
    return GatedConfig(
        name="gated/bad/no_snapshot_check",
        keys=1,
        workload=(OwnerSpec(1, 1),),
        max_outstanding_owners=1,
        max_outstanding_bytes=1,
        windows=((1, 1),),
        capacity=(1, 1, 1),
        max_grant=(1, 1, 1),
        initial_grant=(1, 1, 1),
        max_messages=2,
        max_receiver_restarts=1,
    )


KNOWN_BAD: Mapping[str, tuple[Callable[[], GatedSpec], str]] = {
    "gated/bad/partial_reserve": (
        lambda: PartialReserve(tiny_config()),
        "consumed_equals_token_charges",
    ),
    "gated/bad/blocked_requeued_at_back": (
        lambda: BlockedRequeuedAtBack(_reversal_config()),
        "blocked_owner_keeps_enqueue_order",
    ),
    "gated/bad/no_snapshot_check": (
        lambda: NoSnapshotCheck(_restart_config()),
        "no_dispatch_on_fenced_snapshot",
    ),
    "gated/bad/control_charged_to_data_credit": (
        lambda: ControlChargedToDataCredit(tiny_config()),
        "control_never_blocked_by_data_credit",
    ),
    # Liveness mutants: refuted by the recoverability check, not by an invariant.
    "gated/bad/no_idle_return": (
        lambda: NoIdleReturn(idle_config()),
        "recoverability",
    ),
    "gated/bad/no_refresh": (lambda: GatedSpec(no_refresh_config()), "recoverability"),
    "gated/bad/returns_not_evaluated": (
        lambda: ReturnsNotEvaluated(three_config()),
        "recoverability",
    ),
    "gated/bad/line_passes_blocked_head": (
        lambda: LinePassesBlockedHead(line_config()),
        "bounded_bypass",
    ),
    "gated/bad/line_serves_last_come": (
        lambda: LineServesLastCome(line_config()),
        "bounded_bypass",
    ),
    **gated_mixed.KNOWN_BAD,
}
