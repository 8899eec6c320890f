"""The writer's waits are bounded by its settings (issue 19): the delivery timeout it gives
librdkafka, and how long a write takes at most to fail once the brokers stop answering."""

from __future__ import annotations

import pytest

from airflow_provider_kafka2pc import defaults
from airflow_provider_kafka2pc.errors import ConfigurationError
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter

SETTINGS = {"bootstrap.servers": "127.0.0.1:9092"}


@pytest.mark.parametrize(
    ("settings", "transaction_timeout_ms", "delivery_ms"),
    [
        # librdkafka would use the transaction timeout itself (15 min): a minute instead.
        ({}, defaults.TRANSACTION_TIMEOUT_MS, defaults.DELIVERY_TIMEOUT_MS),
        ({}, 30_000, 15_000),  # never more than half the transaction timeout
        ({"message.timeout.ms": 20_000}, 60_000, 20_000),
        ({"delivery.timeout.ms": "25000"}, 60_000, 25_000),  # librdkafka's alias, as text
        ({"message.timeout.ms": 30_000}, 60_000, 30_000),
    ],
)
def test_delivery_timeout_comes_from_the_settings_bounded_by_the_transaction_timeout(
    settings, transaction_timeout_ms, delivery_ms
):
    writer = TransactionalWriter(
        {**SETTINGS, **settings}, "tx-1", transaction_timeout_ms=transaction_timeout_ms
    )
    assert writer.delivery_timeout_ms == delivery_ms


@pytest.mark.parametrize("value", [30_001, 0, -5, "soon"])
def test_a_delivery_timeout_beyond_half_the_transaction_timeout_is_refused(value):
    with pytest.raises(ConfigurationError, match=r"message\.timeout\.ms"):
        TransactionalWriter(
            {**SETTINGS, "message.timeout.ms": value}, "tx-1", transaction_timeout_ms=60_000
        )


def test_failure_bound_is_the_stall_limit_plus_the_abort():
    writer = TransactionalWriter(SETTINGS, "tx-1", transaction_timeout_ms=30_000, timeout_s=10.0)
    assert writer.stall_limit_s == 15.0 + 10.0
    assert writer.failure_bound_s == 15.0 + 10.0 + 10.0 + 1.0
    default = TransactionalWriter(SETTINGS, "tx-1")
    assert default.failure_bound_s == 60.0 + 2 * defaults.REQUEST_TIMEOUT_MS / 1000 + 1.0
