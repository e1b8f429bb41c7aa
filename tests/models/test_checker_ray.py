"""The Ray engine (the optional ``[ray]`` extra) on a local 2-CPU cluster.

Sharded exploration must give the serial result (counts, verdicts, counterexamples, coverage)
with every shard holding a part of the seen set; a swarm on Ray must equal the same swarm run
in-process, and find a known bug.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from click.testing import CliRunner
from tent_models.checker import CheckerError, CheckResult, check, on_ray, simulate, swarm
from tent_models.cli import main
from tent_models.configs import CONFIGS, KNOWN_BAD_CONFIGS
from toy_models import Counter, Mutex

pytestmark = pytest.mark.slow  # a local Ray cluster takes 10-20 s to start


@pytest.fixture(scope="module", autouse=True)
def cluster() -> Iterator[None]:
    # Imported here, not at module level: a run that deselects the slow set (the README's
    # command) collects this file without Ray installed and neither fails nor skips; the slow
    # stage of .ci/run installs the [ray] extra, and a missing Ray is then an error.
    import ray

    # The toy models live beside this file: the workers import them by path, as a real
    # cluster's workers need the model's modules (see docs/checker_scale.md).
    here = str(Path(__file__).parent)
    ray.init(
        num_cpus=2,
        log_to_driver=False,
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": here}},
    )
    try:
        yield
    finally:
        ray.shutdown()


def comparable(result: CheckResult) -> CheckResult:
    return attrs.evolve(
        result,
        seconds=0.0,
        states_per_second=0.0,
        bytes_per_state=0.0,
        workers=0,
        shard_states=(),
    )


@pytest.mark.parametrize(
    "factory",
    [
        pytest.param(CONFIGS["credit/tiny"], id="credit/tiny"),
        pytest.param(KNOWN_BAD_CONFIGS["equal_sequence_accepted"], id="credit/bad"),
        pytest.param(lambda: Counter(4, recovered_at=None, quiescent_at_limit=False), id="dl"),
        pytest.param(lambda: Mutex(3, vacuous_witness=True), id="mutex-vacuous"),
    ],
)
def test_sharded_exploration_on_ray_equals_serial(factory: Callable[[], Any]) -> None:
    serial = check(factory())
    sharded = check(factory(), workers=2, ray="auto")
    assert comparable(sharded) == comparable(serial)
    assert [len(v.actions) for v in sharded.violations] == [
        len(v.actions) for v in serial.violations
    ]
    assert sum(sharded.shard_states) == serial.distinct_states
    assert len(sharded.shard_states) == 2
    if serial.distinct_states > 10:
        assert all(0 < size < serial.distinct_states for size in sharded.shard_states)


def test_swarm_on_ray_equals_the_same_swarm_in_process_and_finds_a_bug() -> None:
    options = {"seed": 7, "tasks": 4, "walks": 10, "depth": 40}
    here = swarm(CONFIGS["credit/tiny"](), **options)  # type: ignore[arg-type]
    there = swarm(CONFIGS["credit/tiny"](), ray="auto", **options)  # type: ignore[arg-type]
    assert attrs.evolve(here, seconds=0.0, states_per_second=0.0) == attrs.evolve(
        there, seconds=0.0, states_per_second=0.0
    )
    assert there.mode == "swarm" and there.workers == 4 and there.ok
    bad = swarm(
        KNOWN_BAD_CONFIGS["equal_sequence_accepted"](),
        seed=1,
        tasks=4,
        walks=50,
        depth=40,
        ray="auto",
    )
    assert not bad.ok
    assert bad.violations[0].actions  # a minimised, replayable trace


def test_inside_on_ray_check_shards_and_simulate_runs_a_swarm() -> None:
    with on_ray("auto", shards=2, swarm_tasks=3) as engine:
        assert (engine.shards, engine.swarm_tasks) == (2, 3)
        result = check(Mutex(3))
        walked = simulate(Mutex(3), seed=1, walks=6, depth=10)
    assert result.workers == 2 and sum(result.shard_states) == result.distinct_states
    assert walked.mode == "swarm" and walked.workers == 3
    assert check(Mutex(3)).shard_states == ()  # outside the block: serial again


class Exploding(Counter):
    """A model whose successor function fails at value 2 (inside a shard, on Ray)."""

    def successors(self, state: int) -> Any:
        if state == 2:
            raise ValueError("the model broke at 2")
        return super().successors(state)


def test_a_failing_shard_is_a_checker_error_with_the_models_message() -> None:
    with pytest.raises(CheckerError, match="the model broke at 2"):
        check(Exploding(5), workers=2, ray="auto")


def test_tent_check_ray_runs_the_model_on_the_cluster() -> None:
    outcome = CliRunner().invoke(
        main, ["check", "--only", "credit/tiny", "--ray", "auto", "--no-progress", "--json", "-"]
    )
    assert outcome.exit_code == 0, outcome.output
    assert '"credit/tiny"' in outcome.output
