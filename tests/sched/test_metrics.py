"""The deadline metrics (docs/semantics.md#scheduling-metrics)."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter

from tent_sched._queue import TaskStatus
from tent_sched.errors import InvalidArgument, InvalidEntry
from tent_sched.metrics import MLU_PERMILLE_BUCKETS, SchedMetrics

MS = 1_000_000


def observed(registry: CollectorRegistry) -> tuple[float, float, float]:
    """(histogram count, histogram sum, infeasible counter)."""
    count = registry.get_sample_value("tent_deadline_mlu_permille_count")
    total = registry.get_sample_value("tent_deadline_mlu_permille_sum")
    infeasible = registry.get_sample_value("tent_deadline_infeasible_total")
    assert count is not None and total is not None and infeasible is not None
    return count, total, infeasible


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> SchedMetrics:
    return SchedMetrics(registry)


def test_histogram_has_the_reference_buckets(registry: CollectorRegistry) -> None:
    SchedMetrics(registry)
    assert MLU_PERMILLE_BUCKETS == (
        100.0,
        250.0,
        500.0,
        750.0,
        900.0,
        1e3,
        1250.0,
        1500.0,
        2e3,
        5e3,
    )
    for bound in MLU_PERMILLE_BUCKETS:
        assert (
            registry.get_sample_value(
                "tent_deadline_mlu_permille_bucket", {"le": str(float(bound))}
            )
            == 0.0
        )
    assert observed(registry) == (0.0, 0.0, 0.0)


def test_metrics_never_touch_the_global_registry(registry: CollectorRegistry) -> None:
    SchedMetrics(registry)
    assert REGISTRY.get_sample_value("tent_deadline_infeasible_total") is None


def test_completed_with_deadline_ahead_observes_measured_mlu_permille(
    registry: CollectorRegistry, metrics: SchedMetrics
) -> None:
    # 3 ms latency over a 4 ms window → 750 ‰, exactly on a bucket bound (le is inclusive).
    metrics.record_completion(
        status=TaskStatus.COMPLETED, deadline_ns=5 * MS, submit_ns=1 * MS, complete_ns=4 * MS
    )
    assert observed(registry) == (1.0, 750.0, 0.0)
    assert registry.get_sample_value("tent_deadline_mlu_permille_bucket", {"le": "750.0"}) == 1.0
    assert registry.get_sample_value("tent_deadline_mlu_permille_bucket", {"le": "500.0"}) == 0.0


def test_observation_truncates_to_an_integer_permille(
    registry: CollectorRegistry, metrics: SchedMetrics
) -> None:
    # 2 / 3 of the window = 666.67 ‰ → int() gives 666.
    metrics.record_completion(
        status=TaskStatus.COMPLETED, deadline_ns=3, submit_ns=0, complete_ns=2
    )
    assert observed(registry) == (1.0, 666.0, 0.0)


def test_late_completion_observes_above_one_thousand(
    registry: CollectorRegistry, metrics: SchedMetrics
) -> None:
    metrics.record_completion(
        status=TaskStatus.COMPLETED, deadline_ns=2 * MS, submit_ns=0, complete_ns=5 * MS
    )
    assert observed(registry) == (1.0, 2500.0, 0.0)


@pytest.mark.parametrize(
    "status",
    [TaskStatus.FAILED, TaskStatus.TIMEOUT, TaskStatus.CANCELED, TaskStatus.INVALID],
)
def test_only_completed_transfers_are_observed(
    registry: CollectorRegistry, metrics: SchedMetrics, status: TaskStatus
) -> None:
    metrics.record_completion(status=status, deadline_ns=5 * MS, submit_ns=0, complete_ns=1 * MS)
    assert observed(registry) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("status", [TaskStatus.COMPLETED, TaskStatus.FAILED])
@pytest.mark.parametrize("deadline_ns", [1 * MS, 2 * MS])  # before, and equal to, the submit
def test_deadline_past_at_submit_counts_infeasible_on_completed_or_failed(
    registry: CollectorRegistry, metrics: SchedMetrics, status: TaskStatus, deadline_ns: int
) -> None:
    metrics.record_completion(
        status=status, deadline_ns=deadline_ns, submit_ns=2 * MS, complete_ns=3 * MS
    )
    assert observed(registry) == (0.0, 0.0, 1.0)


@pytest.mark.parametrize("status", [TaskStatus.CANCELED, TaskStatus.TIMEOUT, TaskStatus.INVALID])
def test_dropped_or_other_terminal_past_due_transfers_count_nothing(
    registry: CollectorRegistry, metrics: SchedMetrics, status: TaskStatus
) -> None:
    metrics.record_completion(status=status, deadline_ns=1, submit_ns=2, complete_ns=3)
    assert observed(registry) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("status", [TaskStatus.COMPLETED, TaskStatus.FAILED])
def test_no_deadline_records_nothing(
    registry: CollectorRegistry, metrics: SchedMetrics, status: TaskStatus
) -> None:
    metrics.record_completion(status=status, deadline_ns=0, submit_ns=5, complete_ns=9)
    assert observed(registry) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"status": TaskStatus.PENDING},
        {"status": "completed"},
        {"deadline_ns": -1},
        {"submit_ns": 1.0},
        {"complete_ns": True},
        {"submit_ns": 10, "complete_ns": 9},
    ],
)
def test_bad_arguments_are_rejected_and_record_nothing(
    registry: CollectorRegistry, metrics: SchedMetrics, kwargs: dict[str, object]
) -> None:
    call: dict[str, object] = {
        "status": TaskStatus.COMPLETED,
        "deadline_ns": 100,
        "submit_ns": 0,
        "complete_ns": 50,
    }
    call.update(kwargs)
    with pytest.raises(InvalidArgument):
        metrics.record_completion(**call)  # type: ignore[arg-type]
    assert observed(registry) == (0.0, 0.0, 0.0)


def test_registry_must_be_a_collector_registry() -> None:
    with pytest.raises(InvalidArgument):
        SchedMetrics(object())  # type: ignore[arg-type]


def test_second_definition_in_one_registry_is_rejected(registry: CollectorRegistry) -> None:
    first = SchedMetrics(registry)
    with pytest.raises(InvalidEntry):
        SchedMetrics(registry)
    first.record_completion(status=TaskStatus.FAILED, deadline_ns=1, submit_ns=1, complete_ns=1)
    assert observed(registry) == (0.0, 0.0, 1.0)


def test_half_registration_is_undone(registry: CollectorRegistry) -> None:
    squatter = Counter("tent_deadline_infeasible", "taken by someone else", registry=registry)
    with pytest.raises(InvalidEntry):
        SchedMetrics(registry)
    assert registry.get_sample_value("tent_deadline_mlu_permille_count") is None
    # Once the name is free the metrics can be defined: the histogram did not stay registered.
    registry.unregister(squatter)
    SchedMetrics(registry)
    assert observed(registry) == (0.0, 0.0, 0.0)
