"""Scheduling configuration: Deadline Scheduling's defaults, strict types, ranges and error
paths."""

from __future__ import annotations

import json
import logging
import math
from typing import Any

import pytest

from tent_sched._bandwidth import MeterParams
from tent_sched._config import (
    RdmaSchedulingConfig,
    RuntimeQueueConfig,
    SchedulingConfig,
    load_config,
)
from tent_sched._queue import OwnerRequest, QueueLimits
from tent_sched.errors import ConfigError, InvalidArgument

ON = {"enable_runtime_queue": True}  # runtime_queue/* is read only with the queue on

# Deadline Scheduling "Configuration" examples, verbatim.
SEED_RUNTIME_QUEUE = """
{
  "runtime_queue": {
    "max_outstanding_owners": 1024,
    "max_outstanding_bytes": 1073741824,
    "staging_owner_reserve": 0,
    "staging_byte_reserve": 0,
    "max_dispatch_owners": 64,
    "max_dispatch_bytes": 67108864,
    "deadline_aware": true,
    "promotion_slack_ns": 0,
    "mlu_local_threshold": 1.2,
    "progress_fallback_interval_us": 50000
  }
}
"""
SEED_RDMA = """
{
  "transports": {
    "rdma": {
      "deadline_bw_arbitration": true,
      "transmit_bandwidth_learning_rate": 0.9,
      "transmit_meter_interval_ns": 10000000,
      "transmit_meter_max_interval_ns": 50000000
    }
  }
}
"""


def test_defaults_are_the_seed_tables() -> None:
    config = load_config({})
    assert config == SchedulingConfig()
    assert config.enable_runtime_queue is False
    assert config.runtime_queue == RuntimeQueueConfig(
        max_outstanding_owners=1024,
        max_outstanding_bytes=1073741824,
        staging_owner_reserve=0,
        staging_byte_reserve=0,
        max_dispatch_owners=64,
        max_dispatch_bytes=67108864,
        deadline_aware=False,
        promotion_slack_ns=0,
        mlu_local_threshold=0.0,
        allow_aggressive_threshold=False,
        progress_fallback_interval_us=50000,
    )
    assert config.rdma == RdmaSchedulingConfig(
        deadline_bw_arbitration=False,
        transmit_bandwidth_learning_rate=0.9,
        transmit_meter_interval_ns=10_000_000,
        transmit_meter_max_interval_ns=50_000_000,
        bandwidth_learning_rate=0.01,
        ewma_min_bandwidth_multiplier=0.1,
        ewma_max_bandwidth_multiplier=10.0,
        default_bandwidth_gbps=400,
        min_bandwidth_gbps=10,
        max_bandwidth_gbps=800,
        max_qp_wr=256,
    )


def test_the_seed_examples_load() -> None:
    seed = json.loads(SEED_RUNTIME_QUEUE)
    queue_config = load_config({**ON, **seed}).runtime_queue
    assert queue_config.deadline_aware is True
    assert queue_config.mlu_local_threshold == 1.2
    # "Everything under runtime_queue/ is read only when this is on"
    assert load_config(SEED_RUNTIME_QUEUE).runtime_queue == RuntimeQueueConfig()
    rdma = load_config(SEED_RDMA).rdma
    assert rdma.deadline_bw_arbitration is True
    assert rdma.transmit_meter_max_interval_ns == 50_000_000


def test_a_whole_engine_config_loads_and_foreign_keys_are_ignored() -> None:
    engine = {
        "local_segment_name": "node-1",
        "enable_runtime_queue": True,
        "runtime_queue": {"deadline_aware": True, "promotion_slack_ns": 2_000_000},
        "transports": {
            "tcp": {"enable": True},
            "rdma": {"enable": True, "device_filter": ["mlx5_0"], "max_qp_wr": 128},
        },
        "metrics": {"enable": False},
    }
    config = load_config(engine)
    assert config.enable_runtime_queue is True
    assert config.runtime_queue.promotion_slack_ns == 2_000_000
    assert config.rdma.max_qp_wr == 128
    assert load_config(json.dumps(engine)) == config
    assert load_config(json.dumps(engine).encode()) == config


def test_unknown_runtime_queue_key_is_named_with_the_key_it_resembles() -> None:
    with pytest.raises(
        ConfigError,
        match=r"unknown key runtime_queue/max_dispatch_byte; "
        r"did you mean runtime_queue/max_dispatch_bytes\?$",
    ):
        load_config({**ON, "runtime_queue": {"max_dispatch_byte": 1}})
    with pytest.raises(ConfigError, match=r"unknown key runtime_queue/zzz$"):  # nothing close
        load_config({**ON, "runtime_queue": {"zzz": 1}})


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({**ON, "runtime_queue": {"max_dispatch_bytes": True}}, "runtime_queue/max_dispatch_bytes"),
        (
            {**ON, "runtime_queue": {"max_dispatch_bytes": 1024.0}},
            "runtime_queue/max_dispatch_bytes",
        ),
        (
            {**ON, "runtime_queue": {"max_outstanding_owners": "1024"}},
            "runtime_queue/max_outstanding_owners",
        ),
        ({**ON, "runtime_queue": {"deadline_aware": 1}}, "runtime_queue/deadline_aware"),
        (
            {**ON, "runtime_queue": {"mlu_local_threshold": True}},
            "runtime_queue/mlu_local_threshold",
        ),
        (
            {**ON, "runtime_queue": {"mlu_local_threshold": "1.2"}},
            "runtime_queue/mlu_local_threshold",
        ),
        ({"enable_runtime_queue": "true"}, "enable_runtime_queue"),
        ({"transports": {"rdma": {"max_qp_wr": 256.0}}}, "transports/rdma/max_qp_wr"),
        (
            {"transports": {"rdma": {"deadline_bw_arbitration": 0}}},
            "transports/rdma/deadline_bw_arbitration",
        ),
        (
            {"transports": {"rdma": {"bandwidth_learning_rate": [0.5]}}},
            "transports/rdma/bandwidth_learning_rate",
        ),
    ],
)
def test_wrong_types_name_the_path(data: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError, match=f"^{path} "):
        load_config(data)


def test_an_int_is_accepted_for_a_float_field() -> None:
    config = load_config(
        {
            **ON,
            "runtime_queue": {"mlu_local_threshold": 2},
            "transports": {
                "rdma": {"transmit_bandwidth_learning_rate": 1, "default_bandwidth_gbps": 200}
            },
        }
    )
    assert config.runtime_queue.mlu_local_threshold == 2
    assert config.rdma.transmit_bandwidth_learning_rate == 1


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({**ON, "runtime_queue": {"max_dispatch_bytes": 0}}, "runtime_queue/max_dispatch_bytes"),
        ({**ON, "runtime_queue": {"max_dispatch_owners": 0}}, "runtime_queue/max_dispatch_owners"),
        (
            {**ON, "runtime_queue": {"max_outstanding_owners": -1}},
            "runtime_queue/max_outstanding_owners",
        ),
        (
            # an int64 of microseconds, as the reference reads it
            {**ON, "runtime_queue": {"progress_fallback_interval_us": 1 << 63}},
            "runtime_queue/progress_fallback_interval_us",
        ),
        (
            {**ON, "runtime_queue": {"max_outstanding_bytes": 1 << 64}},
            "runtime_queue/max_outstanding_bytes",
        ),
        ({**ON, "runtime_queue": {"promotion_slack_ns": -1}}, "runtime_queue/promotion_slack_ns"),
        (
            {**ON, "runtime_queue": {"progress_fallback_interval_us": -5}},
            "runtime_queue/progress_fallback_interval_us",
        ),
        (
            {**ON, "runtime_queue": {"mlu_local_threshold": math.nan}},
            "runtime_queue/mlu_local_threshold",
        ),
        (
            {**ON, "runtime_queue": {"mlu_local_threshold": math.inf}},
            "runtime_queue/mlu_local_threshold",
        ),
        (
            {"transports": {"rdma": {"transmit_meter_interval_ns": -1}}},
            "transports/rdma/transmit_meter_interval_ns",
        ),
        (
            {"transports": {"rdma": {"transmit_meter_max_interval_ns": 0}}},
            "transports/rdma/transmit_meter_max_interval_ns",
        ),
        ({"transports": {"rdma": {"max_qp_wr": 0}}}, "transports/rdma/max_qp_wr"),
        (
            {"transports": {"rdma": {"ewma_min_bandwidth_multiplier": 0}}},
            "transports/rdma/ewma_min_bandwidth_multiplier",
        ),
        (
            {"transports": {"rdma": {"default_bandwidth_gbps": -400}}},
            "transports/rdma/default_bandwidth_gbps",
        ),
    ],
)
def test_out_of_range_values_name_the_path(data: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError, match=f"^{path} "):
        load_config(data)


@pytest.mark.parametrize("rate", [0, 0.0, 1, 1.0, 0.5])
def test_learning_rates_at_the_bounds_are_accepted(rate: float) -> None:
    rdma = load_config(
        {
            "transports": {
                "rdma": {"bandwidth_learning_rate": rate, "transmit_bandwidth_learning_rate": rate}
            }
        }
    ).rdma
    assert rdma.bandwidth_learning_rate == rdma.transmit_bandwidth_learning_rate == rate


def test_aggressive_threshold_loads_and_its_queue_warns_unless_acknowledged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Deadline Scheduling "Known Limits": a threshold below 1.0 is accepted
    with caplog.at_level(logging.WARNING, logger="tent_sched"):
        config = load_config({**ON, "runtime_queue": {"mlu_local_threshold": 0.9}})
        assert config.runtime_queue.mlu_local_threshold == 0.9
        config.make_queue()
    assert "mlu_local_threshold 0.9 < 1.0" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tent_sched"):
        load_config(
            {
                **ON,
                "runtime_queue": {"mlu_local_threshold": 0.9, "allow_aggressive_threshold": True},
            }
        ).make_queue()
    assert caplog.text == ""


@pytest.mark.parametrize("theta", [-0.5, -2.0, 0])
def test_a_threshold_that_is_not_positive_loads_with_the_drop_off(theta: float) -> None:
    queue = load_config(
        {**ON, "runtime_queue": {"deadline_aware": True, "mlu_local_threshold": theta}}
    ).make_queue()
    (late,) = queue.try_admit(
        1, 1, [OwnerRequest(public_id=1, length=1, deadline_ns=5, degradation_eligible=True)]
    )
    pick = queue.pick_for_dispatch(1, 2048, now_ns=10, bandwidth_bps=1e9)
    assert pick.dropped == () and [p.owner.owner_id for p in pick.picked] == [late]


@pytest.mark.parametrize(("rate", "clamped"), [(1.01, 1.0), (2, 1.0), (-0.01, 0.0), (-3, 0.0)])
def test_learning_rates_outside_the_unit_interval_are_clamped(rate: float, clamped: float) -> None:
    # as the reference's setSchedulingParams does: a configuration it accepts loads here too
    rdma = load_config(
        {
            "transports": {
                "rdma": {"bandwidth_learning_rate": rate, "transmit_bandwidth_learning_rate": rate}
            }
        }
    ).rdma
    assert rdma.bandwidth_learning_rate == rdma.transmit_bandwidth_learning_rate == clamped
    assert MeterParams.from_config(rdma).bandwidth_learning_rate == clamped


def test_a_zero_meter_interval_loads() -> None:
    rdma = load_config({"transports": {"rdma": {"transmit_meter_interval_ns": 0}}}).rdma
    assert MeterParams.from_config(rdma).transmit_meter_interval_ns == 0


def test_the_reference_limits_load_with_the_queue_on() -> None:
    # zero outstanding maxima (a queue that admits nothing), a dispatch window of one, θ -1
    # (the drop off) and the largest int64 interval: all valid where the reference says so
    queue = load_config(
        {
            **ON,
            "runtime_queue": {
                "max_dispatch_owners": 1,
                "max_dispatch_bytes": 1,
                "max_outstanding_owners": 0,
                "max_outstanding_bytes": 0,
                "mlu_local_threshold": -1.0,
                "progress_fallback_interval_us": (1 << 63) - 1,
                "promotion_slack_ns": (1 << 64) - 1,
            },
        }
    ).runtime_queue
    assert (queue.max_outstanding_owners, queue.mlu_local_threshold) == (0, -1.0)


def test_null_groups_and_values_take_their_defaults() -> None:
    # JSON null is "not set": the reference's reader skips it
    config = load_config(
        {
            "enable_runtime_queue": None,
            "runtime_queue": {},
            "transports": None,
            "rpc_server_port": None,
        }
    )
    assert config == SchedulingConfig()
    on = load_config(
        {
            **ON,
            "runtime_queue": {"max_dispatch_owners": None, "deadline_aware": True},
            "transports": {"rdma": None},
        }
    )
    assert on.runtime_queue.max_dispatch_owners == 64 and on.runtime_queue.deadline_aware
    assert on.rdma == RdmaSchedulingConfig()


def test_a_key_written_as_a_flat_path_is_read_as_the_nested_one() -> None:
    # the reference's Config reads "runtime_queue/max_dispatch_owners" either way; ignoring the
    # flat form would silently drop a limit the user wrote
    flat = load_config(
        {
            **ON,
            "runtime_queue/max_dispatch_owners": 8,
            "transports/rdma/deadline_bw_arbitration": True,
        }
    )
    nested = load_config(
        {
            **ON,
            "runtime_queue": {"max_dispatch_owners": 8},
            "transports": {"rdma": {"deadline_bw_arbitration": True}},
        }
    )
    assert flat == nested and flat.runtime_queue.max_dispatch_owners == 8
    both = {
        **ON,
        "runtime_queue/max_dispatch_owners": 8,
        "runtime_queue": {"max_dispatch_owners": 8},
    }
    assert load_config(both).runtime_queue == nested.runtime_queue  # the same twice: one value
    with pytest.raises(ConfigError, match=r"^runtime_queue/max_dispatch_owners is given twice"):
        load_config({**both, "runtime_queue/max_dispatch_owners": 9})
    with pytest.raises(ConfigError, match=r"unknown key runtime_queue/max_dispatch_owner;"):
        load_config({**ON, "runtime_queue/max_dispatch_owner": 8})
    with pytest.raises(ConfigError, match=r"^runtime_queue/max_dispatch_owners "):
        load_config({**ON, "runtime_queue/max_dispatch_owners": 0})
    # with the queue off, flat runtime_queue keys are not read either
    assert load_config({"runtime_queue/max_dispatch_owners": 0}) == SchedulingConfig()


@pytest.mark.parametrize(
    "section",
    [
        {"max_dispatch_owners": 0, "max_dispatch_bytes": 0},
        {"max_outstanding_owners": -1, "max_outstanding_bytes": 0},
        {"mlu_local_threshold": "high", "zzz": 1},
        {"staging_owner_reserve": 5, "max_outstanding_owners": 4},
        [1],
    ],
)
def test_runtime_queue_is_not_read_while_the_queue_is_off(section: Any) -> None:
    # "Everything under runtime_queue/ is read only when this is on"
    for data in (
        {"runtime_queue": section},
        {"enable_runtime_queue": False, "runtime_queue": section},
    ):
        config = load_config(data)
        assert config.enable_runtime_queue is False
        assert config.runtime_queue == RuntimeQueueConfig()
    with pytest.raises(ConfigError, match="runtime_queue"):
        load_config({**ON, "runtime_queue": section})


@pytest.mark.parametrize(
    ("section", "match"),
    [
        ({"staging_owner_reserve": 5, "max_outstanding_owners": 4}, "staging_owner_reserve"),
        ({"staging_byte_reserve": 11, "max_outstanding_bytes": 10}, "staging_byte_reserve"),
    ],
)
def test_reserve_above_its_limit_is_a_config_error(section: dict[str, int], match: str) -> None:
    with pytest.raises(ConfigError, match=f"runtime_queue/{match}"):
        load_config({**ON, "runtime_queue": section})


@pytest.mark.parametrize(
    ("rdma", "match"),
    [
        (
            {"ewma_min_bandwidth_multiplier": 2.0, "ewma_max_bandwidth_multiplier": 1.0},
            "ewma_min_bandwidth_multiplier",
        ),
        ({"min_bandwidth_gbps": 900, "max_bandwidth_gbps": 800}, "min_bandwidth_gbps"),
    ],
)
def test_min_above_max_is_a_config_error(rdma: dict[str, float], match: str) -> None:
    with pytest.raises(ConfigError, match=f"transports/rdma/{match}"):
        load_config({"transports": {"rdma": rdma}})


def test_max_interval_below_the_interval_is_raised_to_it() -> None:
    rdma = load_config(
        {
            "transports": {
                "rdma": {
                    "transmit_meter_interval_ns": 20_000_000,
                    "transmit_meter_max_interval_ns": 5_000_000,
                }
            }
        }
    ).rdma
    assert rdma.transmit_meter_max_interval_ns == 20_000_000


@pytest.mark.parametrize(
    "data",
    [
        "{not json",
        b"\xff\xfe",
        "[1, 2]",
        '{"runtime_queue": {"deadline_aware": true, "deadline_aware": false}}',
        {**ON, "runtime_queue": [1]},
        {"transports": "rdma"},
        {"transports": {"rdma": 3}},
        42,
    ],
)
def test_malformed_documents_are_config_errors(data: Any) -> None:
    with pytest.raises(ConfigError):
        load_config(data)


def test_config_errors_are_invalid_arguments() -> None:
    with pytest.raises(InvalidArgument):
        load_config({**ON, "runtime_queue": {"max_dispatch_owners": 0}})


def test_limits_and_make_queue_follow_the_runtime_queue_section() -> None:
    config = load_config(
        {
            **ON,
            "runtime_queue": {
                "max_outstanding_owners": 8,
                "max_outstanding_bytes": 4096,
                "staging_owner_reserve": 2,
                "staging_byte_reserve": 1024,
                "max_dispatch_bytes": 2048,
                "deadline_aware": True,
                "mlu_local_threshold": 1.2,
            },
        }
    )
    assert config.runtime_queue.limits() == QueueLimits(
        max_outstanding_owners=8,
        max_outstanding_bytes=4096,
        staging_owner_reserve=2,
        staging_byte_reserve=1024,
    )
    queue = config.make_queue()
    assert queue.limits == config.runtime_queue.limits()
    assert queue.deadline_aware is True
    with pytest.raises(InvalidArgument, match="max_dispatch_bytes"):
        queue.try_admit(1, 1, [OwnerRequest(public_id=1, length=2049)])
    # θ 1.2 is live: a past-due eligible owner is dropped.
    (late,) = queue.try_admit(
        1, 1, [OwnerRequest(public_id=1, length=1, deadline_ns=5, degradation_eligible=True)]
    )
    assert queue.pick_for_dispatch(1, 2048, now_ns=10, bandwidth_bps=1e9).dropped == (late,)


def test_config_objects_validate_on_direct_construction() -> None:
    with pytest.raises(ConfigError, match="runtime_queue/max_dispatch_owners"):
        RuntimeQueueConfig(max_dispatch_owners=0)
    with pytest.raises(ConfigError, match="transports/rdma/max_qp_wr"):
        RdmaSchedulingConfig(max_qp_wr=-1)
    with pytest.raises(ConfigError, match="enable_runtime_queue"):
        SchedulingConfig(enable_runtime_queue=None)  # type: ignore[arg-type]


def test_rdma_section_feeds_the_bandwidth_meters() -> None:
    rdma = load_config(
        {"transports": {"rdma": {"transmit_meter_interval_ns": 7, "bandwidth_learning_rate": 0.5}}}
    ).rdma
    params = MeterParams.from_config(rdma)
    assert params.transmit_meter_interval_ns == 7
    assert params.bandwidth_learning_rate == 0.5
    assert MeterParams.from_config(RdmaSchedulingConfig()) == MeterParams()
