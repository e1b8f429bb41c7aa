"""Lockstep runs of the credit adapter: :class:`CreditRun`, replaying a trace
(:func:`run_credit`), the seeded random walk (:func:`run_credit_conformance`) and
:func:`export_regression`, which pins a trace as a test.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import cast

import attrs
from tent_spec.credit import (
    CreditBounds,
    CreditSpec,
    CreditState,
)

from tent_credit._trace import TraceSink
from tent_models.conformance._lockstep import (
    ActionInstance,
    Divergence,
    Lockstep,
    StepVerdict,
)
from tent_models.conformance.credit._adapter import CreditAdapter
from tent_models.conformance.credit._model import (
    CONFORMANCE_BOUNDS,
    EagerGrantSpec,
)
from tent_models.model_api import SpecModel


@attrs.frozen
class CreditRun:
    """One lockstep run: the eager-grant model, the adapter and the :class:`Lockstep`."""

    model: EagerGrantSpec
    adapter: CreditAdapter
    lockstep: Lockstep[CreditState]

    @property
    def state(self) -> CreditState:
        """The spec's current state."""
        return self.lockstep.state

    def step(self, action: str, args: tuple[Hashable, ...]) -> StepVerdict | Divergence:
        """:meth:`Lockstep.step`."""
        return self.lockstep.step(action, args)

    def menu(self) -> list[ActionInstance]:
        """The spec-enabled action instances the implementation can take now (a driver's
        menu; never ``grant``, which is scheduled eagerly)."""
        state = self.lockstep.state
        return [
            (step.action, tuple(step.args))
            for step in self.model.spec.successors(state)
            if step.action != "grant"
            and self.adapter.supported(state, step.action, tuple(step.args))
        ]

    def drawable(self, action: str, args: tuple[Hashable, ...]) -> bool:
        """False for a spec-enabled step the implementation never takes (a driver skips it)."""
        state = self.lockstep.state
        enabled = self.model.apply(state, action, args) is not None
        return not enabled or self.adapter.supported(state, action, args)


def credit_lockstep(
    bounds: CreditBounds = CONFORMANCE_BOUNDS,
    *,
    spec: CreditSpec | None = None,
    trace: TraceSink | None = None,
) -> CreditRun:
    """A lockstep run of the eager-grant spec (``spec``, or the clean spec under ``bounds``)
    and a fresh :class:`CreditAdapter` (passing ``trace`` to its endpoints)."""
    clean = spec if spec is not None else CreditSpec(bounds, name="credit/conformance")
    adapter = CreditAdapter(clean.bounds, trace=trace)
    model = EagerGrantSpec(clean, push_order=adapter.push_order)
    # The spec restates model_api's Step/Invariant shapes (docs/design.md#principle-2): structural
    # only.
    lockstep = Lockstep(cast("SpecModel[CreditState]", model), adapter)
    return CreditRun(model=model, adapter=adapter, lockstep=lockstep)


def run_credit(
    actions: Iterable[ActionInstance],
    *,
    bounds: CreditBounds = CONFORMANCE_BOUNDS,
    spec: CreditSpec | None = None,
) -> Divergence | None:
    """Replay ``actions`` on the (eager-grant) spec and a fresh implementation in lockstep.

    Returns the first divergence, or ``None``. Steps the spec refuses are checked as refusals.
    """
    run = credit_lockstep(bounds, spec=spec)
    for action, args in actions:
        verdict = run.step(action, args)
        if isinstance(verdict, Divergence):
            return verdict
    return run.lockstep.divergence


WALK_WEIGHTS: Mapping[str, float] = {
    "deliver": 4.0,
    "reserve": 2.0,
    "commit": 2.0,
    "data_lands": 2.0,
    "report_usage": 2.0,
    "duplicate": 0.3,
    "lose": 0.3,
    "become_stale": 0.2,
    "publish_regressed": 0.1,
    "sender_restart": 0.1,
    "receiver_restart": 0.05,
}
"""Relative weight of an action name in a random walk (1.0 when absent): faults are rare, so a
walk reaches grants, reservations and landings between them."""


def weighted_choice(rng: random.Random, menu: Sequence[ActionInstance]) -> ActionInstance:
    """Draw an action name by :data:`WALK_WEIGHTS`, then one of its instances uniformly."""
    by_name: dict[str, list[ActionInstance]] = {}
    for instance in menu:
        by_name.setdefault(instance[0], []).append(instance)
    names = sorted(by_name)
    name = rng.choices(names, weights=[WALK_WEIGHTS.get(n, 1.0) for n in names])[0]
    return rng.choice(by_name[name])


def run_credit_conformance(
    *,
    steps: int,
    seed: int,
    bounds: CreditBounds = CONFORMANCE_BOUNDS,
    spec: CreditSpec | None = None,
    trace: TraceSink | None = None,
    exclude: frozenset[str] = frozenset(),
) -> Divergence | None:
    """A seeded random walk of ``steps`` steps in lockstep; the first divergence or ``None``.

    Each step draws among the enabled, implementation-supported action instances (faults
    included) with :func:`weighted_choice`, and one step in ten is a draw that ignores the guards
    (a refused one is checked as a refusal).
    ``spec`` replaces the clean spec (e.g. a known-bad variant, which must diverge); ``trace``
    records the implementation's events; ``exclude`` names actions never drawn (a trace meant
    for validation excludes ``publish_regressed``: the harness, not the receiver, forges that
    update). ``tent check`` runs a few hundred steps of this.
    """
    rng = random.Random(seed)
    run = credit_lockstep(bounds, spec=spec, trace=trace)
    for _ in range(steps):
        if run.lockstep.divergence is not None:
            return run.lockstep.divergence
        menu = [instance for instance in run.menu() if instance[0] not in exclude]
        if rng.random() < 0.1 or not menu:
            action, args = _refused_draw(rng, run.state, bounds)
            if not run.drawable(action, args):
                continue  # enabled, but not a step the implementation takes (see supported)
        else:
            action, args = weighted_choice(rng, menu)
        verdict = run.step(action, args)
        if isinstance(verdict, Divergence):
            return verdict
    return run.lockstep.divergence


def _refused_draw(rng: random.Random, state: CreditState, bounds: CreditBounds) -> ActionInstance:
    """A draw that ignores the guards: reserve, commit, rollback, return or reclaim anything."""
    s = rng.randrange(bounds.senders)
    c = rng.randrange(len(bounds.charges))
    action = rng.choice(("reserve", "commit", "rollback", "return_unused", "reclaim_after_fence"))
    if action == "reclaim_after_fence":
        return action, (s, rng.randint(1, state.peers[s].epoch))
    return action, (s, c)


def export_regression(
    trace_steps: Sequence[ActionInstance],
    *,
    name: str = "test_pinned_trace_conforms",
    bounds_expr: str = "CONFORMANCE_BOUNDS",
    comment: str = "",
) -> str:
    """Python test source that replays ``trace_steps`` through :func:`run_credit`.

    ``trace_steps`` is a list of ``(action, args)`` pairs (e.g. a model-checker
    ``CounterExample.actions``); ``bounds_expr`` is an expression for the bounds, evaluated in the
    generated module (``CONFORMANCE_BOUNDS`` and ``conformance_bounds`` are imported there). The
    test asserts that the real implementation conforms along the whole trace.
    """
    lines = [
        '"""Pinned credit conformance regression (generated by export_regression)."""',
        "",
        "from tent_models.configs import CREDIT_BOUNDS, KNOWN_BAD_BOUNDS",
        "from tent_models.conformance.credit import (",
        "    CONFORMANCE_BOUNDS,",
        "    conformance_bounds,",
        "    run_credit,",
        ")",
        "from tent_spec.credit import Activation, Update, Usage",
        "",
        "# Keep the names the generated trace may use (ruff: F401).",
        "_NAMES = (CREDIT_BOUNDS, KNOWN_BAD_BOUNDS, CONFORMANCE_BOUNDS, conformance_bounds)",
        "_MESSAGES = (Activation, Update, Usage)",
        "",
        "ACTIONS = [",
    ]
    lines.extend(f"    ({action!r}, {tuple(args)!r})," for action, args in trace_steps)
    lines += ["]", "", "", f"def {name}() -> None:"]
    if comment:
        lines.extend(f"    # {line}" for line in comment.splitlines())
    lines += [
        f"    divergence = run_credit(ACTIONS, bounds={bounds_expr})",
        "    assert divergence is None, divergence.format()",
        "",
    ]
    return "\n".join(lines)
