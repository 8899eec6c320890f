"""The record-timestamp rules (transaction/retention.py), as a table: what a topic keeps,
what its broker rejects, and what the caller may let through. The broker's side
(DescribeConfigs, the records really deleted) is in tests/integration/test_retention.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_provider_kafka2pc.errors import (
    ConfigurationError,
    PermanentError,
    ProtocolError,
    TimestampRefusedError,
)
from airflow_provider_kafka2pc.protocol.configs import (
    ConfigEntry,
    ConfigSource,
    describe_topic_configs_request,
    parse_topic_configs,
)
from airflow_provider_kafka2pc.transaction.retention import (
    EXPIRING,
    LONG_MAX,
    REJECTED,
    TimestampSpan,
    TopicTimestampPolicy,
    iso_ms,
    refuse_record_timestamps,
    timestamp_refusals,
)
from airflow_provider_kafka2pc.transaction.topic_configs import check_record_timestamps

NOW = 1_795_000_000_000  # 2026-11-18T08:26:40Z
DAY = 86_400_000
HOUR = 3_600_000
MARCH = 1_772_323_200_000  # 2026-03-01T00:00:00Z

#: Kafka 4's defaults as DescribeConfigs answers them for a topic that sets nothing.
DEFAULTS = {
    "cleanup.policy": "delete",
    "retention.ms": str(7 * DAY),
    "retention.bytes": "-1",
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": str(LONG_MAX),
    "message.timestamp.after.max.ms": str(HOUR),
}


def policy(topic: str = "t", **settings: str) -> TopicTimestampPolicy:
    configs = {**DEFAULTS, **{k.replace("_", "."): v for k, v in settings.items()}}
    return TopicTimestampPolicy.from_configs(topic, configs)


def kinds(p: TopicTimestampPolicy, oldest: int, newest: int | None = None, **kw) -> list[str]:
    span = TimestampSpan(oldest, oldest if newest is None else newest)
    return [f"{r.kind}:{r.setting}" for r in timestamp_refusals({"t": p}, span, "ts", NOW, **kw)]


@pytest.mark.parametrize(
    ("settings", "oldest", "newest", "expected"),
    [
        # Kafka's default retention (7 days) and a March timestamp: deleted at once.
        ({}, MARCH, NOW, ["expiring:retention.ms"]),
        ({}, NOW - 6 * DAY, NOW, []),
        # The margin: 7 days less 30 min is deleted within the hour, refused.
        ({}, NOW - 7 * DAY + 30 * 60_000, NOW, ["expiring:retention.ms"]),
        ({}, NOW - 7 * DAY + 2 * HOUR, NOW, []),
        # compact alone: no time retention; compact,delete: there is.
        ({"cleanup_policy": "compact"}, MARCH, NOW, []),
        ({"cleanup_policy": "compact,delete"}, MARCH, NOW, ["expiring:retention.ms"]),
        ({"cleanup_policy": "delete, compact"}, MARCH, NOW, ["expiring:retention.ms"]),
        # retention.ms = -1 keeps forever.
        ({"retention_ms": "-1"}, MARCH, NOW, []),
        # A topic keeping 30 min still takes fresh records: the margin is half of it.
        ({"retention_ms": str(30 * 60_000)}, NOW - 60_000, NOW, []),
        ({"retention_ms": str(30 * 60_000)}, NOW - 20 * 60_000, NOW, ["expiring:retention.ms"]),
        # The future: Kafka 4 rejects beyond 1 h ahead; no margin that way.
        ({}, NOW, NOW + HOUR, []),
        ({}, NOW, NOW + HOUR + 1, ["rejected:message.timestamp.after.max.ms"]),
        ({"message_timestamp_after_max_ms": str(LONG_MAX)}, NOW, NOW + 400 * DAY, []),
        # The past bound: the broker rejects before retention would delete.
        (
            {"message_timestamp_before_max_ms": str(30 * DAY), "retention_ms": "-1"},
            MARCH,
            NOW,
            ["rejected:message.timestamp.before.max.ms"],
        ),
        (
            {"message_timestamp_before_max_ms": str(30 * DAY)},
            MARCH,
            NOW + 2 * HOUR,
            [
                "rejected:message.timestamp.before.max.ms",
                "expiring:retention.ms",
                "rejected:message.timestamp.after.max.ms",
            ],
        ),
        # LogAppendTime: the broker stamps the records itself; nothing applies.
        ({"message_timestamp_type": "LogAppendTime"}, MARCH, NOW + 400 * DAY, []),
    ],
)
def test_what_is_refused(settings, oldest, newest, expected):
    assert kinds(policy(**settings), oldest, newest) == expected


def test_allow_expiring_lets_retention_through_but_never_a_rejection():
    p = policy(message_timestamp_before_max_ms=str(30 * DAY))
    assert kinds(p, MARCH, NOW + 2 * HOUR, allow_expiring=True) == [
        "rejected:message.timestamp.before.max.ms",
        "rejected:message.timestamp.after.max.ms",
    ]
    assert kinds(policy(), MARCH, NOW, allow_expiring=True) == []


def test_kafka_3_difference_max_fills_the_bounds_left_at_their_default():
    """Kafka 3.6-3.9: before/after.max.ms at Long.MAX take difference.max.ms, as its
    LogConfig does; one set explicitly wins."""
    p = TopicTimestampPolicy.from_configs(
        "t",
        {
            **DEFAULTS,
            "message.timestamp.after.max.ms": str(LONG_MAX),
            "message.timestamp.difference.max.ms": str(DAY),
        },
    )
    assert (p.before_max_ms, p.after_max_ms) == (DAY, DAY)
    assert (
        "from message.timestamp.difference.max.ms" in p.sources["message.timestamp.before.max.ms"]
    )
    both_set = TopicTimestampPolicy.from_configs(
        "t",
        {
            **DEFAULTS,
            "message.timestamp.before.max.ms": str(2 * DAY),
            "message.timestamp.difference.max.ms": str(DAY),
        },
    )
    assert (both_set.before_max_ms, both_set.after_max_ms) == (2 * DAY, HOUR)


def test_the_refusal_names_column_value_topic_setting_and_fix():
    configs = {
        name: ConfigEntry(name, value, ConfigSource.DEFAULT) for name, value in DEFAULTS.items()
    }
    configs["retention.ms"] = ConfigEntry("retention.ms", str(7 * DAY), ConfigSource.STATIC_BROKER)
    policies = {"orders": TopicTimestampPolicy.from_configs("orders", configs)}
    with pytest.raises(TimestampRefusedError) as refused:
        refuse_record_timestamps(policies, TimestampSpan(MARCH, NOW), "updated_at", NOW)
    text = str(refused.value)
    assert "timestamp_column 'updated_at'" in text
    assert "2026-03-01T00:00:00.000Z (1772323200000 ms)" in text
    assert "topic 'orders'" in text
    assert "retention.ms=604800000 (7 days, the broker's server.properties)" in text
    assert "cleanup.policy=compact" in text and "allow_expiring_timestamps=True" in text
    assert "before any transaction opened" in text
    [refusal] = refused.value.refusals
    assert (refusal.topic, refusal.kind, refusal.timestamp_ms) == ("orders", EXPIRING, MARCH)
    assert isinstance(refused.value, ConfigurationError) and isinstance(
        refused.value, PermanentError
    )


def test_a_future_refusal_names_the_newest_value_and_says_the_option_does_not_help():
    with pytest.raises(TimestampRefusedError) as refused:
        refuse_record_timestamps(
            {"t": policy()}, TimestampSpan(NOW, NOW + DAY), "ts", NOW, allow_expiring=True
        )
    [r] = refused.value.refusals
    assert (r.kind, r.setting, r.limit_ms) == (
        REJECTED,
        "message.timestamp.after.max.ms",
        NOW + HOUR,
    )
    assert iso_ms(NOW + DAY) in r.message and "does not help" in r.message


def test_per_topic_spans_and_a_note_for_log_append_time():
    policies = {
        "old": policy("old"),
        "stamped": policy("stamped", message_timestamp_type="LogAppendTime"),
    }
    spans = {"old": TimestampSpan(NOW - DAY, NOW), "stamped": TimestampSpan(MARCH, NOW)}
    notes = refuse_record_timestamps(policies, spans, "ts", NOW)
    assert len(notes) == 1 and "'stamped'" in notes[0] and "not kept" in notes[0]
    assert timestamp_refusals(policies, {"old": TimestampSpan(MARCH, NOW)}, "ts", NOW)[0].topic == (
        "old"
    )


class FakeBroker:
    """Answers DescribeConfigs from a table; counts the calls."""

    def __init__(self, configs=None, error: ProtocolError | None = None) -> None:
        self.configs, self.error, self.calls = configs or {}, error, []

    def describe_topic_configs(self, topics, names=None):
        self.calls.append((list(topics), list(names or ())))
        if self.error:
            raise self.error
        return {
            t: {k: ConfigEntry(k, v) for k, v in self.configs.get(t, DEFAULTS).items()}
            for t in topics
        }


def test_check_record_timestamps_asks_once_and_not_at_all_without_rows():
    broker = FakeBroker()
    assert check_record_timestamps(broker, ["a", "b"], NOW - DAY, NOW, "ts", now_ms=NOW) == []
    assert len(broker.calls) == 1 and broker.calls[0][0] == ["a", "b"]
    assert "retention.ms" in broker.calls[0][1]
    assert check_record_timestamps(broker, ["a"], None, None, "ts") == []
    assert len(broker.calls) == 1
    with pytest.raises(TimestampRefusedError, match="topic 'b'"):
        check_record_timestamps(broker, ["b"], MARCH, NOW, "ts", now_ms=NOW)


def test_a_controller_lends_its_connection():
    broker = FakeBroker()
    controller = SimpleNamespace(protocol=broker)
    with pytest.raises(TimestampRefusedError):
        check_record_timestamps(controller, ["a"], MARCH, NOW, "ts", now_ms=NOW)


def test_no_describe_configs_acl_skips_the_check_with_a_note():
    denied = FakeBroker(error=ProtocolError("refused", "TOPIC_AUTHORIZATION_FAILED"))
    [note] = check_record_timestamps(denied, ["a"], MARCH, NOW, "ts", now_ms=NOW)
    assert "not checked" in note and "DESCRIBE_CONFIGS" in note
    unknown = FakeBroker(error=ProtocolError("no such topic", "UNKNOWN_TOPIC_OR_PARTITION"))
    with pytest.raises(ConfigurationError, match="no such topic"):
        check_record_timestamps(unknown, ["a"], MARCH, NOW, "ts", now_ms=NOW)


def test_describe_configs_builder_and_parser():
    request = describe_topic_configs_request(["a"], ["retention.ms"], 4)
    [resource] = request.resources
    assert (resource.resource_type, resource.resource_name) == (2, "a")
    assert resource.configuration_keys == ["retention.ms"]
    entry = SimpleNamespace(name="retention.ms", value="-1", config_source=1)
    answer = SimpleNamespace(
        results=[
            SimpleNamespace(error_code=0, error_message=None, resource_name="a", configs=[entry])
        ]
    )
    assert parse_topic_configs(answer) == {
        "a": {"retention.ms": ConfigEntry("retention.ms", "-1", ConfigSource.TOPIC)}
    }
    refused = SimpleNamespace(
        results=[SimpleNamespace(error_code=3, error_message=None, resource_name="x", configs=[])]
    )
    with pytest.raises(ProtocolError, match="'x': UNKNOWN_TOPIC_OR_PARTITION"):
        parse_topic_configs(refused)
