"""The export group with every wire option, end to end: spark-submit with Spark's Avro
package, the registry's settings from an ``http`` connection in a private file, registry
Avro values, tombstones and record timestamps; read back through the real registry."""

from __future__ import annotations

import json
import stat
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from airflow_provider_kafka2pc.operators.prepare import SparkKafkaPrepareOperator
from tests.conftest import assert_exactly_once
from tests.integration.test_wire_formats import consume_all
from tests.support.registry import HOME

ROWS = 300
#: A day ago: inside the topic's retention (older stamps are refused before anything opens).
BASE_MS = (int(time.time()) - 24 * 3600) * 1000
REGISTRY_CONN_ID = "schema_registry_test"


class SpyPrepare(SparkKafkaPrepareOperator):
    """Notes the spark-submit arguments and the registry file at the moment of submitting."""

    seen: ClassVar[dict[str, Any]] = {}

    def spark_hook(self, job, kafka=None):
        hook = super().spark_hook(job, kafka)
        build = hook.submit_hook

        def spy(args, conf):  # SparkJobHook builds Spark's hook right before submitting
            path = Path(args[args.index("--registry-config-file") + 1])
            SpyPrepare.seen.update(
                args=list(args),
                packages=job.submit_dict().get("packages"),
                path=path,
                mode=stat.S_IMODE(path.stat().st_mode),
                settings=json.loads(path.read_text()),
            )
            return build(args, conf)

        hook.submit_hook = spy
        return hook


def test_registry_avro_tombstones_and_timestamps_through_the_task_group(
    export_dag, run_export, make_topic, protocol, bootstrap, registry, monkeypatch, capfd
):
    secret = f"pw-{uuid.uuid4().hex}"
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{REGISTRY_CONN_ID.upper()}",
        json.dumps({"conn_type": "http", "host": registry, "login": "u", "password": secret}),
    )
    topic = make_topic(2)
    dag = export_dag(
        topic=topic,
        source={
            "sql": "SELECT id AS order_id, concat('customer-', id % 17) AS customer, "
            f"timestamp_millis({BASE_MS} + id) AS updated_at FROM range(0, {ROWS})"
        },
        registry_conn_id=REGISTRY_CONN_ID,
        value_format={
            "record_name": "Order",
            "namespace": "shop",
            "subject_name_strategy": "topic_record_name",
        },
        tombstone_when="order_id % 5 = 0",
        timestamp_column="updated_at",
        spark_conf={"spark.jars.ivy": str(HOME / "spark-ivy")},
        operator_classes={"prepare": SpyPrepare},
    )

    result = run_export(dag, day=1)

    assert result.state == "success", result
    assert result.tasks["commit"] == "success"
    report, seen = assert_exactly_once(
        protocol, bootstrap, topic, committed=ROWS, aborted=0, keys_unique=True
    )
    assert report.tombstones == sum(seen.tombstones.values()) == ROWS // 5

    client = SchemaRegistryClient({"url": registry})
    assert f"{topic}-shop.Order" in client.get_subjects()
    decode = AvroDeserializer(client)
    for message in consume_all(bootstrap, topic, ROWS):
        order_id = int(message.key())
        assert message.timestamp() == (TIMESTAMP_CREATE_TIME, BASE_MS + order_id)
        if order_id % 5 == 0:
            assert message.value() is None
            continue
        row = decode(message.value(), SerializationContext(topic, MessageField.VALUE))
        assert row["order_id"] == order_id and row["customer"] == f"customer-{order_id % 17}"

    # The registry's password reached the job in a private file only, removed since.
    spied = SpyPrepare.seen
    assert "spark-avro_2.13" in spied["packages"]
    assert spied["settings"]["basic.auth.user.info"] == f"u:{secret}"
    assert spied["mode"] == 0o600 and not spied["path"].exists()
    assert secret not in json.dumps(spied["args"])
    out, err = capfd.readouterr()
    assert "Spark-Submit cmd" in out + err
    assert secret not in out + err


def test_a_bad_registry_format_is_refused_when_the_dag_is_defined(export_env, make_topic):
    from airflow_provider_kafka2pc.errors import ConfigurationError
    from tests.airflow import dagtest

    with pytest.raises(ConfigurationError, match="subject_name_strategy 'topic'"):
        dagtest.export_dag(
            "bad_format",
            topic=make_topic(1),
            registry_conn_id=REGISTRY_CONN_ID,
            value_format={"subject_name_strategy": "topic"},
        )
    with pytest.raises(ConfigurationError, match=r"unknown registry format option\(s\) \['name'\]"):
        dagtest.export_dag("bad_format2", topic=make_topic(1), key_format={"name": "Order"})
    assert not export_env.path.exists()  # the ledger was never opened
