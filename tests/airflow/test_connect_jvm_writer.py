"""The JVM writer on a real Spark Connect server: our jar's DataSource ``kafka2pc``.

A server started with our jar and kafka-clients on ``--jars`` runs Kafka's Java producer in
its executors for a Connect client (``writer="auto"`` takes it); one without them gets them
shipped with the session (test_connect_artifacts). Witnesses as everywhere: the log's
markers (committed once, none open) and a read_committed consumer; plus where the server
could show the Kafka secret.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka2pc.coordination.finish import Coordinator
from airflow_provider_kafka2pc.coordination.recovery import recover
from airflow_provider_kafka2pc.defaults import GRACE_PERIOD
from airflow_provider_kafka2pc.errors import Kafka2pcError
from airflow_provider_kafka2pc.ledger import Ledger
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.spark.alignment import JAR
from airflow_provider_kafka2pc.spark.connect import remote_session
from airflow_provider_kafka2pc.spark.jvm_writer import HOOK_PROPERTY, kafka_clients_jar
from airflow_provider_kafka2pc.spark.remote import prepare_remote_argv
from airflow_provider_kafka2pc.transaction.controller import TransactionController
from airflow_provider_kafka2pc.transaction.manifest import Manifest
from tests.airflow.test_export_connect import ui_pages
from tests.conftest import assert_exactly_once, audit, unique_id
from tests.support.connect import ConnectServer, connect_server
from tests.support.jvm_test_jar import fault_hook, jvm_test_jar

ROWS = 400


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    # The tests' jar too: its fault hook (the product jar has none).
    jars = [JAR, kafka_clients_jar(), jvm_test_jar()]
    with connect_server(tmp_path_factory.mktemp("connect-jvm"), jars=jars) as running:
        yield running


def routed_rows(path: Path, topics: list[str]) -> Path:
    path.write_text(
        "".join(
            json.dumps({"id": i, "payload": f"row-{i}", "kind": topics[i % len(topics)]}) + "\n"
            for i in range(ROWS)
        )
    )
    return path


def argv(source: Path, manifest: Path, ids: list[str], topics: list[str]) -> list[str]:
    return [
        *("--source-path", str(source), "--source-format", "json"),
        *("--key-column", "id", "--value-column", "payload"),
        *("--topic-column", "kind", "--topics", ",".join(topics)),
        *("--transactional-ids", ",".join(ids), "--manifest", str(manifest)),
    ]


def test_auto_on_a_server_with_the_jar_prepares_several_topics_with_the_jvm_writer_exactly_once(
    server: ConnectServer,
    settings: dict[str, Any],
    protocol: KafkaProtocol,
    bootstrap: str,
    make_topic,
    tmp_path: Path,
) -> None:
    topics = [make_topic(2), make_topic(3)]
    ids = [unique_id("connect-jvm") for _ in range(3)]
    manifest = tmp_path / "manifest.json"
    # A SASL password on a PLAINTEXT listener: the clients ignore it, we must not leak it.
    secret = f"s3cret-{uuid.uuid4().hex}"
    config = {**settings, "sasl.username": "kafka2pc-user", "sasl.password": secret}
    source = routed_rows(tmp_path / "rows.json", topics)
    with remote_session(server.url, "connect-jvm") as spark:
        batch = prepare_remote_argv(spark, argv(source, manifest, ids, topics), config)
        # The session settings that carried the secret and the results are gone.
        assert not [k for k in spark.conf.getAll if k.startswith("kafka2pc.")]

    assert batch.metadata["writer"] == "jvm", batch.metadata
    assert "writer_reason" not in batch.metadata
    assert Manifest.from_json(manifest.read_text()).committables == batch.committables
    assert batch.source_rows == ROWS and len(batch.committables) == len(ids)
    outcomes = TransactionController(protocol).commit_all(batch.committables)
    assert len(outcomes) == len(ids)
    for i, topic in enumerate(topics):
        rows = len(range(i, ROWS, len(topics)))
        assert_exactly_once(protocol, bootstrap, topic, *batch.committables, committed=rows)
    # The executors had the secret, the server shows it nowhere: not in its log, its
    # event log (which holds the plans and the Connect statements), its UI.
    logged = server.logged()
    assert "kafka2pc" in logged  # the write's plan is there
    assert secret not in logged
    assert secret not in ui_pages(server)


def test_a_task_failing_mid_write_fails_the_prepare_and_leaves_nothing_open(
    server: ConnectServer,
    settings: dict[str, Any],
    protocol: KafkaProtocol,
    make_topic,
    tmp_path: Path,
) -> None:
    topics = [make_topic(2), make_topic(2)]
    export_id, prefix = "connect-jvm-fault", unique_id("connect-jvm-fault")
    manifest = tmp_path / "manifest.json"
    source = routed_rows(tmp_path / "rows.json", topics)
    with Ledger(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        batch = ledger.begin(
            export_id, "run", topic=topics[0], topics=topics, id_prefix=prefix, num_partitions=2
        )
        ids = list(batch.transactional_ids)
        with remote_session(server.url, "connect-jvm-fault") as spark:
            # Partition 1 fails after 20 rows in every attempt (the writer's own error path).
            spark.conf.set(HOOK_PROPERTY, fault_hook("1,20,-1,fail"))
            with pytest.raises(Kafka2pcError, match="open transactions"):
                prepare_remote_argv(spark, argv(source, manifest, ids, topics), settings)
        assert not manifest.exists()
        # No fence by the test: the orchestrator's own abort (the abort task's), then the
        # next run's recovery round. A task killed as the job failed no longer opens its
        # transaction after the job's fence (it asks Spark first); one that still did is
        # fenced by the abort's sweep, or by that round at once (its id back in the pool).
        controller = TransactionController(protocol)
        aborted = Coordinator(ledger, controller).abort(export_id, "run", "the prepare failed")
        report = recover(
            ledger, protocol, controller, export_id, [prefix], grace_period=GRACE_PERIOD
        )
    said = [line for line in server.logged().splitlines() if "kafka2pc: connect-jvm" in line]
    print(f"abort fenced {aborted.fenced}, found open after it {aborted.late}; recovery: "
          f"{report.summary()}")  # fmt: skip
    assert not report.left and not report.failed, (report.to_dict(), said)
    ongoing = protocol.list_transactions(prefix=prefix, states=["Ongoing"])
    assert [t for t in ongoing if t.transactional_id in ids] == [], said
    for topic in topics:
        totals = audit(protocol, topic).totals
        # Aborted records may or may not have reached the log before the aborts (a failed
        # task's records still in its producer's buffer never do): not asserted here.
        assert totals["committed"] == totals["open"] == totals["non_transactional"] == 0
