"""The engine configuration: Deadline Scheduling's keys through tent_sched, receiver_credit,
dispatch."""

from __future__ import annotations

import json

import pytest
from tent_transport.config import EngineConfig, ReceiverCreditConfig, load_engine_config
from tent_transport.errors import ConfigError, InvalidArgument

from tent_credit import CreditMode, CreditResource, SessionId
from tent_credit._allocator import ReceiverCreditAllocator


def test_defaults_are_the_seeds_and_credit_is_off() -> None:
    config = load_engine_config("{}")
    assert config.enable_runtime_queue is False
    assert config.sched.runtime_queue.max_dispatch_bytes == 64 << 20
    assert config.sched.rdma.transmit_meter_interval_ns == 10_000_000
    assert config.receiver_credit.enabled is False
    assert config.receiver_credit.credit_mode is CreditMode.DISABLED
    assert config.dispatch.slice_bytes == 4 << 20


def test_seed_sections_are_read_by_tent_sched() -> None:
    config = load_engine_config(
        {
            "enable_runtime_queue": True,
            "runtime_queue": {"deadline_aware": True, "mlu_local_threshold": 1.2},
            "transports": {"rdma": {"deadline_bw_arbitration": True, "max_qp_wr": 16}},
        }
    )
    assert config.sched.runtime_queue.mlu_local_threshold == 1.2
    assert config.sched.rdma.deadline_bw_arbitration is True
    assert config.sched.rdma.max_qp_wr == 16


def test_a_tent_sched_error_becomes_a_transport_config_error() -> None:
    with pytest.raises(ConfigError, match="runtime_queue/bogus") as info:
        load_engine_config({"enable_runtime_queue": True, "runtime_queue": {"bogus": 1}})
    assert info.value.__cause__ is not None


def test_receiver_credit_without_the_runtime_queue_is_refused() -> None:
    with pytest.raises(ConfigError, match="requires enable_runtime_queue"):
        load_engine_config({"receiver_credit": {"enabled": True}})


def test_enabled_without_a_mode_is_required_fail_closed() -> None:
    config = load_engine_config(
        {"enable_runtime_queue": True, "receiver_credit": {"enabled": True}}
    )
    assert config.receiver_credit.credit_mode is CreditMode.REQUIRED
    assert config.receiver_credit.gate_config().mode is CreditMode.REQUIRED


@pytest.mark.parametrize(
    ("section", "match"),
    [
        ({"enabled": False, "mode": "optional"}, "enabled is false"),
        ({"enabled": True, "mode": "disabled"}, "enabled is true"),
        ({"enabled": True, "mode": "sometimes"}, "mode must be one of"),
        ({"enabled": 1}, "must be a bool"),
        ({"default_qos_class": 1 << 32}, "default_qos_class"),
        ({"capacity": {"data_bytez": 1}}, "unknown credit resource"),
        ({"capacity": {"data_bytes": -1}}, "u64"),
        ({"grant": {"max_grant": {"data_bytes": 0}}}, "max_grant"),
        ({"grant": {"lease": 2}}, "unknown key receiver_credit/grant/lease"),
        ({"typo": 1}, "unknown key receiver_credit/typo"),
        ({"staging_reserve": {"request_slots": 5000}}, "staging_reserve"),
    ],
)
def test_bad_receiver_credit_sections_are_refused(section: dict[str, object], match: str) -> None:
    data = {"enable_runtime_queue": True, "receiver_credit": section}
    with pytest.raises(ConfigError, match=match):
        load_engine_config(data)


def test_capacities_and_grant_policy_build_the_allocator() -> None:
    config = load_engine_config(
        {
            "enable_runtime_queue": True,
            "receiver_credit": {
                "enabled": True,
                "mode": "optional",
                "default_qos_class": 3,
                "capacity": {"data_bytes": 32 << 20, "request_slots": 8, "consumer_slots": 8},
                "grant": {"max_grant": {"request_slots": 2}, "retry_after_us": 50},
            },
        }
    )
    credit = config.receiver_credit
    assert credit.credit_mode is CreditMode.OPTIONAL
    allocator = credit.allocator_config()
    assert allocator.capacity[CreditResource.REQUEST_SLOTS] == 8
    assert allocator.max_grant[CreditResource.REQUEST_SLOTS] == 2
    assert allocator.max_grant[CreditResource.DATA_BYTES] == 32 << 20  # defaults to capacity
    assert allocator.retry_after_us == 50


@pytest.mark.parametrize(("pool", "granted"), [(0, 0), (4, 4), (64, 16), (None, 16)])
def test_credit_never_promises_more_staging_slots_than_the_pool_has(
    pool: int | None, granted: int
) -> None:
    config = load_engine_config(
        {
            "enable_runtime_queue": True,
            "receiver_credit": {
                "enabled": True,
                "mode": "required",
                "capacity": {"staging_slots": 16},
                "grant": {"max_grant": {"staging_slots": 8}},
            },
        }
    )
    allocator = config.receiver_credit.allocator_config(staging_slots=pool)
    assert allocator.capacity[CreditResource.STAGING_SLOTS] == granted
    assert allocator.max_grant[CreditResource.STAGING_SLOTS] == max(1, min(8, granted))
    alloc = ReceiverCreditAllocator(allocator, SessionId(1))
    assert alloc.free(CreditResource.STAGING_SLOTS) == granted  # what grants can carve


def test_dispatch_section_is_strict() -> None:
    assert (
        load_engine_config({"dispatch": {"slice_bytes": 1 << 20}}).dispatch.slice_bytes == 1 << 20
    )
    with pytest.raises(ConfigError, match="dispatch/slice_bytes"):
        load_engine_config({"dispatch": {"slice_bytes": 0}})
    with pytest.raises(ConfigError, match="unknown key dispatch/slice"):
        load_engine_config({"dispatch": {"slice": 1}})


def test_json_text_duplicates_and_garbage_are_refused() -> None:
    with pytest.raises(ConfigError, match="duplicate key"):
        load_engine_config('{"dispatch": {}, "dispatch": {}}')
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_engine_config("{")
    with pytest.raises(ConfigError, match="must be an object"):
        load_engine_config(json.dumps([1]))
    with pytest.raises(ConfigError, match="receiver_credit must be an object"):
        load_engine_config({"receiver_credit": 3})


def test_other_top_level_sections_are_left_to_the_engine() -> None:
    assert load_engine_config({"control": {"listen": "127.0.0.1:0"}}).enable_runtime_queue is False


def test_config_error_is_an_invalid_argument() -> None:
    assert issubclass(ConfigError, InvalidArgument)
    with pytest.raises(ConfigError):
        EngineConfig(receiver_credit=ReceiverCreditConfig(enabled=True))


def test_max_key_outstanding_caps_one_key_through_the_engine_config() -> None:
    # A key asking for every byte with one request slot must not take the free bytes the fair
    # split would otherwise hand it as its "one unit": the engine's config carries the cap.
    config = load_engine_config(
        {
            "enable_runtime_queue": True,
            "receiver_credit": {
                "enabled": True,
                "capacity": {"data_bytes": 800, "request_slots": 4},
                "max_key_outstanding": {"data_bytes": 200},
            },
        }
    )
    alloc = ReceiverCreditAllocator(config.receiver_credit.allocator_config(), SessionId(5))
    alloc.open_epoch(1, 0)
    hostile = alloc.grant(
        1, 0, {CreditResource.DATA_BYTES: 2**64 - 1, CreditResource.REQUEST_SLOTS: 1}
    )
    assert hostile.granted_now[CreditResource.DATA_BYTES] == 200
    with pytest.raises(ConfigError, match="max_key_outstanding"):
        load_engine_config(
            {
                "enable_runtime_queue": True,
                "receiver_credit": {"enabled": True, "max_key_outstanding": {"data_bytez": 1}},
            }
        )


def test_credit_versions_default_to_every_supported_one_and_bad_lists_are_refused() -> None:
    from tent_credit import SUPPORTED_VERSIONS

    assert ReceiverCreditConfig().versions == SUPPORTED_VERSIONS
    assert ReceiverCreditConfig(versions=[1]).versions == (1,)  # type: ignore[arg-type]
    for bad in ([], [0], [1, 99], "1", [True], None):
        with pytest.raises(ConfigError, match="versions"):
            ReceiverCreditConfig(versions=bad)  # type: ignore[arg-type]
