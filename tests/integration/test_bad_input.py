"""Bad input: a clear error naming the problem, and nothing left behind (no open transaction).

"Nothing left behind" is checked by both witnesses: the log audit and a read_committed
consumer that does not stall. Broker tests run on Apache Kafka 4.x and 3.9.
"""

from __future__ import annotations

import json
import time

import pytest

from airflow_provider_kafka2pc.connection.settings import redact, to_kafka_python
from airflow_provider_kafka2pc.errors import (
    BrokerUnreachableError,
    CommittableError,
    ConfigurationError,
    WriteError,
)
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from tests.conftest import (
    assert_ended,
    assert_exactly_once,
    cli,
    cli_prepare,
    unique_id,
    write_jsonl,
)
from tests.support.scripted import ScriptedBroker

pytestmark = pytest.mark.kafka_versions()

DEAD = "127.0.0.1:1"  # nothing listens on port 1


def test_unreachable_bootstrap_fails_within_timeout_naming_the_address():
    started = time.monotonic()
    with pytest.raises(BrokerUnreachableError, match=DEAD):
        TransactionalWriter({"bootstrap.servers": DEAD}, "tx", timeout_s=2).write(
            "t", [(b"k", b"v")]
        )
    with pytest.raises(BrokerUnreachableError, match=DEAD):
        KafkaProtocol({"bootstrap.servers": DEAD}, timeout_ms=2000)
    assert time.monotonic() - started < 10


def test_unknown_topic_fails_before_opening_a_transaction(settings, bootstrap, protocol, topic):
    tid = unique_id()
    with pytest.raises(ConfigurationError, match=r"does not exist.*create it first"):
        TransactionalWriter(settings, tid).write("no-such-topic", [(b"k", b"v")])
    # The id was never initialised: a real write on it starts at epoch 0.
    committable = TransactionalWriter(settings, tid).write(topic, [(b"k", b"v")])
    assert committable.producer_epoch == 0
    assert TransactionController(protocol).commit(committable).outcome is Outcome.COMMITTED
    assert_exactly_once(protocol, bootstrap, topic, committable, committed=1, aborted=0)


def test_oversized_record_aborts_and_leaves_nothing_open(settings, bootstrap, protocol, topic):
    records = [(b"%d" % i, b"small") for i in range(5)] + [(b"big", b"x" * 2_000_000)]
    tid = unique_id()
    with pytest.raises(WriteError, match=r"record 5 refused.*too large"):
        TransactionalWriter(settings, tid).write(topic, records)
    assert_ended(protocol, tid)
    report, _ = assert_exactly_once(protocol, bootstrap, topic, committed=0)
    assert report.totals["aborted"] <= 5, report.to_dict()


def test_failing_input_mid_write_aborts(settings, bootstrap, protocol, topic):
    def rows():
        for i in range(1000):
            yield b"%d" % i, b"v"
        raise RuntimeError("source broke")

    tid = unique_id()
    with pytest.raises(WriteError, match="source broke"):
        TransactionalWriter(settings, tid).write(topic, rows())
    assert_ended(protocol, tid)
    report, _ = assert_exactly_once(protocol, bootstrap, topic, committed=0)
    # Whatever reached the log before the abort is marked aborted; the rest was purged.
    assert report.totals["aborted"] <= 1000


def test_cli_bad_line_aborts_the_prepare(bootstrap, protocol, topic, tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", 300)
    with source.open("a") as out:
        out.write('{"payload": "no id here"}\n')
    done = cli_prepare(bootstrap, topic, unique_id(), source)
    assert done.returncode == 2
    assert "line 301" in json.loads(done.stdout)["message"]
    report, _ = assert_exactly_once(protocol, bootstrap, topic, committed=0)
    assert report.totals["aborted"] <= 300


@pytest.mark.parametrize("tid", ["", "   ", "a b", "x" * 201, "semi;colon", None, 7])
def test_invalid_transactional_id_is_rejected_naming_the_field(tid):
    with pytest.raises(ConfigurationError, match="transactional_id"):
        TransactionalWriter({"bootstrap.servers": DEAD}, tid)


def valid_committable() -> dict:
    return ScriptedBroker().prepare().to_dict()


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.pop("producer_id"), "producer_id"),
        (lambda d: d.update(producer_epoch="3"), "producer_epoch"),
        (lambda d: d.update(producer_epoch=40000), "producer_epoch"),
        (lambda d: d.update(transactional_id=""), "transactional_id"),
        (lambda d: d.update(transaction_version=9), "transaction_version"),
        (lambda d: d.update(record_count=999), "record_count"),
        (lambda d: d.update(partitions="p0"), "partitions"),
        (lambda d: d["partitions"][0].pop("topic"), "topic"),
        (lambda d: d["partitions"][1].update(last_offset=-1), "last_offset"),
        (lambda d: d.update(schema=2), "schema"),
        (lambda d: d.update(transaction_timeout_ms=True), "transaction_timeout_ms"),
    ],
)
def test_malformed_committable_names_the_field(mutate, field):
    data = valid_committable()
    mutate(data)
    with pytest.raises(CommittableError, match=field):
        Committable.from_dict(data)


def test_committable_round_trips_through_json():
    committable = ScriptedBroker().prepare(partitions=3)
    assert Committable.from_json(committable.to_json()) == committable
    with pytest.raises(CommittableError, match="not valid JSON"):
        Committable.from_json("{oops")


def test_cli_rejects_a_malformed_committable_without_contacting_kafka(tmp_path):
    path = tmp_path / "c.json"
    data = valid_committable()
    data["producer_id"] = "abc"
    path.write_text(json.dumps(data))
    done = cli("commit", "-b", DEAD, str(path))
    assert done.returncode == 2
    assert "producer_id" in json.loads(done.stdout)["message"]


def test_no_secret_in_errors_or_logs(caplog):
    secret = "hunter2-do-not-log"
    config = {"bootstrap.servers": DEAD, "sasl.password": secret, "no.such.setting": "1"}
    with pytest.raises(ConfigurationError) as raised:
        TransactionalWriter(config, "tx").write("t", [(b"k", b"v")])
    assert secret not in str(raised.value)
    assert "***" in str(raised.value)
    done = cli(
        "commit",
        "-b",
        DEAD,
        "--config",
        f"sasl.password={secret}",
        "--config",
        "security.protocol=SASL_PLAINTEXT",
        "--config",
        "sasl.mechanism=PLAIN",
        "--config",
        "sasl.username=u",
        "--timeout-ms",
        "1500",
        "-",
        stdin=valid_committable_json(),
    )
    assert done.returncode != 0
    assert secret not in done.stdout + done.stderr
    assert secret not in caplog.text


def valid_committable_json() -> str:
    return json.dumps(valid_committable())


def test_settings_translate_for_the_control_plane():
    translated = to_kafka_python(
        {
            "bootstrap.servers": "a:1,b:2",
            "security.protocol": "sasl_ssl",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "u",
            "sasl.password": "p",
            "ssl.ca.location": "/ca.pem",
            "ssl.endpoint.identification.algorithm": "none",
            "linger.ms": 5,
        }
    )
    assert translated == {
        "bootstrap_servers": ["a:1", "b:2"],
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "u",
        "sasl_plain_password": "p",
        "ssl_cafile": "/ca.pem",
        "ssl_check_hostname": False,
    }
    assert redact({"sasl.password": "p", "ssl.key.password": "k", "x": 1}) == {
        "sasl.password": "***",
        "ssl.key.password": "***",
        "x": 1,
    }


@pytest.mark.parametrize(
    ("config", "name"),
    [
        ({}, "bootstrap.servers"),
        ({"bootstrap.servers": "a:1", "security.protocol": "KERBEROS"}, "security.protocol"),
        ({"bootstrap.servers": "a:1", "sasl.mechanism": "GSSAPI"}, "sasl.mechanism"),
    ],
)
def test_unsupported_control_plane_settings_are_named(config, name):
    with pytest.raises(ConfigurationError, match=name):
        to_kafka_python(config)


def test_writer_refuses_settings_it_owns():
    with pytest.raises(ConfigurationError, match=r"transactional\.id"):
        TransactionalWriter({"bootstrap.servers": DEAD, "transactional.id": "x"}, "tx")


def test_empty_committable_commits_without_a_request():
    broker = ScriptedBroker()
    empty = Committable.empty("tx-empty", 0, 1000)
    assert TransactionController(broker).commit(empty).outcome is Outcome.COMMITTED
    assert broker.calls == []
