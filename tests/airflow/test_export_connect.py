"""The export group with its prepare on a real Spark Connect server (PySpark's own).

The ``spark_default`` connection is a ``spark_connect`` one here: the prepare operator
chooses the Connect path by it, runs the prepare in the task's process and sends the plan
to the server. Witnesses as everywhere: the log's markers (committed once, none open) and
a read_committed consumer; plus where the server could show the Kafka secret.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_kafka2pc.errors import PrepareError
from airflow_provider_kafka2pc.export import default_id_prefix
from airflow_provider_kafka2pc.ledger import BatchState, ParticipantState, Verdict
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.transaction.manifest import ALIGNED
from airflow_provider_kafka2pc.version_compat import AirflowFailException
from tests.airflow import dagtest
from tests.airflow.test_job_errors import (
    CASES,
    EVERY_PATH,
    RaisingPrepare,
    assert_refused_once,
    rows_with,
)
from tests.airflow.test_loss_repair import EXPORT_TIMEOUT_MS, CommitRetriedAfterTheTimeout
from tests.conftest import assert_exactly_once
from tests.support.connect import ConnectServer, connect_server

ROWS = 300


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    with connect_server(tmp_path_factory.mktemp("connect")) as running:
        yield running


def use_connect(monkeypatch: pytest.MonkeyPatch, server: ConnectServer) -> None:
    """``spark_default`` becomes the Spark provider's ``spark_connect`` connection."""
    host, port = server.url.removeprefix("sc://").split(":")
    value = {"conn_type": "spark_connect", "host": host, "port": int(port)}
    monkeypatch.setenv(f"AIRFLOW_CONN_{dagtest.SPARK_CONN_ID.upper()}", json.dumps(value))


def ui_pages(server: ConnectServer) -> str:
    """What the server's UI shows of its Connect sessions and SQL executions."""
    base = f"http://127.0.0.1:{server.ui_port}"
    pages = []
    for path in ("/connect/", "/SQL/", "/api/v1/applications"):
        with urllib.request.urlopen(base + path, timeout=30) as answer:
            pages.append(answer.read().decode(errors="replace"))
    app = json.loads(pages[-1])[0]["id"]
    for path in (f"/api/v1/applications/{app}/sql?details=true", "/connect/session/"):
        try:
            with urllib.request.urlopen(base + path, timeout=30) as answer:
                pages.append(answer.read().decode(errors="replace"))
        except OSError:
            pass
    return "\n".join(pages)


def test_export_on_connect_is_exactly_once_keeps_the_secret_off_the_server_and_reruns_nothing(
    server, export_dag, run_export, make_topic, protocol, bootstrap, settings, ledger,
    monkeypatch, capfd, caplog,
):  # fmt: skip
    caplog.set_level("INFO")
    use_connect(monkeypatch, server)
    # A SASL password on a PLAINTEXT listener: the clients ignore it, we must not leak it.
    secret = f"s3cret-{uuid.uuid4().hex}"
    extra = {**settings, "sasl.username": "kafka2pc-user", "sasl.password": secret}
    for key, value in dagtest.kafka_connection_env(extra).items():
        monkeypatch.setenv(key, value)
    topic = make_topic(2)
    dag = export_dag(topic=topic, rows=ROWS)

    result = run_export(dag, day=1)

    assert result.state == "success", result
    assert result.tasks == {
        "recover": "success",
        "prepare": "success",
        "decide": "success",
        "commit": "success",
        "abort": "skipped",
    }
    prepared = result.xcom("prepare")
    assert prepared["records"] == prepared["source_rows"] == ROWS
    export_id, run_key = prepared["export_id"], prepared["run_key"]
    with ledger.open() as store:
        batch = store.get(export_id, run_key)
        parts = store.participants(export_id, run_key)
    assert batch.state is BatchState.COMMITTED and batch.verdict is Verdict.COMMIT
    # 2 Spark partitions into 2 Kafka partitions: aligned, so the jar's key hash was
    # uploaded to the session and registered there.
    assert batch.partitioning == ALIGNED
    assert [p.state for p in parts] == [ParticipantState.COMMITTED] * 2
    assert_exactly_once(
        protocol, bootstrap, topic, *[p.committable for p in parts], committed=ROWS, aborted=0
    )
    out, err = capfd.readouterr()
    logged = out + err + caplog.text
    assert "on the Spark Connect server of connection" in logged
    assert "Spark-Submit cmd" not in logged  # no spark-submit ran

    # The executors had the secret (they would have failed on a SASL listener without
    # it; here: the plan carries the artifact's name instead), but the server shows it
    # nowhere: not in its log, its event log (which holds the plans it ran), its UI.
    assert "sasl.password" not in server.logged()
    assert secret not in server.logged()
    assert secret not in ui_pages(server)
    assert secret not in logged

    again = run_export(dag, day=1)

    assert again.state == "success", again
    assert again.tasks["prepare"] == "skipped" and again.tasks["commit"] == "skipped"
    assert_exactly_once(protocol, bootstrap, topic, committed=ROWS, aborted=0)


def test_the_plan_sent_to_the_server_carries_closed_over_values_but_not_shipped_secrets(
    server,
):
    """Why the settings ship apart: ``mapInArrow``'s function is pickled into the plan the
    server receives (and may log in full: seen in its INFO log when a session closes
    with an execution still held), so a secret it closed over travels in it. The writer
    built from :func:`ship_settings` carries the artifact's name instead."""
    from airflow_provider_kafka2pc.spark.connect import (
        SETTINGS_ARTIFACT,
        remote_session,
        ship_settings,
    )
    from airflow_provider_kafka2pc.spark.partition_writer import RESULT_SCHEMA, partition_writer

    secret = f"s3cret-{uuid.uuid4().hex}"
    config = {"bootstrap.servers": "broker:9092", "sasl.password": secret}

    def plan_bytes(df) -> bytes:
        return df._plan.to_proto(df.sparkSession.client).SerializeToString()

    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ
    with remote_session(server.url, "witness") as spark:
        naive = partition_writer(["t-0"], config, "topic", 60_000, [])
        assert secret.encode() in plan_bytes(spark.range(3).mapInArrow(naive, RESULT_SCHEMA))
        shipped = ship_settings(spark, config)
        writer = partition_writer(["t-0"], shipped, "topic", 60_000, [])
        plan = plan_bytes(spark.range(3).mapInArrow(writer, RESULT_SCHEMA))
    assert secret.encode() not in plan
    assert shipped[SETTINGS_ARTIFACT].encode() in plan
    # PySpark's process-wide switch to Connect is undone: a classic session can follow.
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ


def test_settings_shipped_apart_are_whole_again_on_the_executors(server, tmp_path):
    """What the writer gets on an executor: the secret and the TLS file's content, though
    the plan held only their artifacts' names (the file is read where the executor is)."""
    from airflow_provider_kafka2pc.spark.connect import (
        FILE_ARTIFACTS,
        SETTINGS_ARTIFACT,
        executor_settings,
        remote_session,
        ship_settings,
    )

    secret = f"s3cret-{uuid.uuid4().hex}"
    ca = tmp_path / "ca.pem"
    ca.write_text(f"-----BEGIN CERTIFICATE-----\n{uuid.uuid4().hex}\n")
    config = {
        "bootstrap.servers": "broker:9093",
        "security.protocol": "SASL_SSL",
        "sasl.username": "u",
        "sasl.password": secret,
        "ssl.ca.location": str(ca),
        "ssl.key.location": "/only/on/the/server/key.pem",  # not here: passed as it is
    }
    with remote_session(server.url, "shipping") as spark:
        shipped = ship_settings(spark, config)

        def on_executor(batches):
            import pyarrow as pa

            settings = executor_settings(shipped)
            ca_text = Path(settings["ssl.ca.location"]).read_text()
            for _ in batches:
                pass
            yield pa.RecordBatch.from_pylist([{"settings": json.dumps(settings), "ca": ca_text}])

        (row,) = (
            spark.range(1)
            .coalesce(1)
            .mapInArrow(on_executor, "settings string, ca string")
            .collect()
        )
    assert secret not in json.dumps(shipped)
    assert str(ca) not in json.dumps(shipped)
    assert set(shipped) == {
        "bootstrap.servers",
        "security.protocol",
        "sasl.username",
        "ssl.key.location",
        SETTINGS_ARTIFACT,
        FILE_ARTIFACTS,
    }
    whole = json.loads(row["settings"])
    assert whole["sasl.password"] == secret
    assert row["ca"] == ca.read_text()
    assert whole["ssl.ca.location"] != str(ca)  # the executor's copy
    assert whole["ssl.key.location"] == "/only/on/the/server/key.pem"
    assert {k: v for k, v in whole.items() if k != "ssl.ca.location"} == {
        k: v for k, v in config.items() if k != "ssl.ca.location"
    }


def test_loss_repair_through_connect_is_exactly_once(
    server, export_dag, run_export, make_topic, protocol, bootstrap, ledger, monkeypatch
):
    """Flink's data-loss scenario (see test_loss_repair): the broker aborts two committed
    participants' transactions after the COMMIT verdict; the commit re-prepares them
    through the same Connect server, from the same input, and commits exactly once."""
    use_connect(monkeypatch, server)
    topic = make_topic(3)
    rows = 300
    dag = export_dag(
        topic=topic,
        rows=rows,
        num_partitions=3,
        retries=1,
        transaction_timeout_ms=EXPORT_TIMEOUT_MS,
        commit_margin_s=1.0,
        operator_classes={"commit": CommitRetriedAfterTheTimeout},
    )

    result = run_export(dag, day=7)

    assert result.state == "success", result
    assert result.tries["commit"] == 2, result
    prepared = CommitRetriedAfterTheTimeout.seen["prepared"]
    committed = result.xcom("commit")
    assert [r["partition"] for r in committed["repaired"]] == [1, 2], committed
    with ledger.open() as store:
        batch = store.get(committed["export_id"], committed["run_key"])
        parts = store.participants(batch.export_id, batch.run_key)
    assert batch.state is BatchState.COMMITTED
    assert [p.state for p in parts] == [ParticipantState.COMMITTED] * 3
    lost_rows = sum(c.record_count for c in prepared[1:])
    assert_exactly_once(
        protocol,
        bootstrap,
        topic,
        *prepared,
        *[p.committable for p in parts[1:]],
        committed=rows,
        aborted=lost_rows,
    )


def kill_when_writing(
    server: ConnectServer, ledger_path: Path, settings: dict, seen: dict
) -> threading.Thread:
    """Kill the server (SIGKILL, its whole process group) as soon as one of the export's
    leased ids has a transaction open at its transaction coordinator: mid-write."""
    from airflow_provider_kafka2pc.ledger import Ledger

    def watch() -> None:
        deadline = time.monotonic() + 300
        with Ledger(f"sqlite:///{ledger_path}") as store, KafkaProtocol(settings) as protocol:
            while time.monotonic() < deadline:
                batches = store.in_doubt(seen["export_id"])
                ids = [t for b in batches for t in b.transactional_ids]
                if ids:
                    try:
                        states = {d.state for d in protocol.describe_transactions(ids)}
                    except Exception:  # not initialised yet (TransactionalIdNotFound), ...
                        states = set()
                    if "Ongoing" in states:
                        server.kill()
                        seen["killed"] = time.time()
                        return
                time.sleep(0.05)

    thread = threading.Thread(target=watch, name="kill-connect-server", daemon=True)
    thread.start()
    return thread


#: What the prepare may take past the client's retry window once the server is gone: the
#: attempts themselves (refused at once), the error's way out and the task's end on a busy
#: machine (measured: 46.3 and 46.4 s in all, inside the window; one more window, as each
#: cleanup call took before, would be 45 s).
SLACK_S = 15.0


def test_server_killed_mid_prepare_fails_within_the_bound_and_leaves_nothing_open(
    export_dag, run_export, make_topic, protocol, bootstrap, settings, ledger, monkeypatch,
    tmp_path,
):  # fmt: skip
    """The server SIGKILLed while the export's transactions are open: the prepare fails
    within the client's retry window (docs/spark-connect.md), not one window per cleanup
    call on the way out; the orchestrator's abort leaves nothing open (the test fences
    nothing)."""
    from airflow_provider_kafka2pc.spark.connect import MAX_BACKOFF_MS, RETRIES
    from airflow_provider_kafka2pc.spark.connect_retries import LostServerPolicy, window_s

    with connect_server(tmp_path / "connect") as doomed:
        use_connect(monkeypatch, doomed)
        topic = make_topic(2)
        rows = 200_000  # long enough a write for the kill to land inside it
        dag = export_dag(topic=topic, rows=rows)
        seen = {"export_id": f"{dag.dag_id}.{dagtest.GROUP_ID}"}
        watcher = kill_when_writing(doomed, ledger.path, settings, seen)

        result = run_export(dag, day=3)
        watcher.join(timeout=30)

    assert "killed" in seen, "the server was not killed while the transactions were open"
    assert result.state == "failed", result
    assert result.tasks["prepare"] == "failed"
    (prepare,) = [t for t in result.dag_run.get_task_instances() if t.task_id.endswith("prepare")]
    took = prepare.end_date.timestamp() - seen["killed"]
    bound = window_s(LostServerPolicy(RETRIES, MAX_BACKOFF_MS))
    print(f"the prepare failed {took:.1f} s after the kill (bound {bound:.2f} s + {SLACK_S} s)")
    assert took <= bound + SLACK_S, (took, bound)
    assert result.tasks["decide"] == "success" and result.tasks["commit"] == "skipped"
    verdict = result.xcom("decide", key="verdict")
    assert verdict["verdict"] == "ABORT"
    with ledger.open() as store:
        batch = store.get(verdict["export_id"], verdict["run_key"])
    assert batch.state is BatchState.ABORTED
    assert sorted(result.xcom("abort", key="abort")["fenced"]) == sorted(batch.transactional_ids)
    assert protocol.list_transactions(prefix=batch.id_prefix, states=["Ongoing"]) == []
    assert_exactly_once(protocol, bootstrap, topic, committed=0)


def test_the_jvm_writer_asked_for_through_the_task_on_a_plain_server_is_exactly_once(
    server, export_dag, run_export, make_topic, protocol, bootstrap, monkeypatch, capfd, caplog
):
    """``writer="jvm"`` on the TaskGroup, the server as PySpark ships it: the prepare task
    ships the jars to its session and the write runs in the server's JVM."""
    caplog.set_level("INFO")
    use_connect(monkeypatch, server)
    topic = make_topic(2)
    dag = export_dag(topic=topic, rows=ROWS, writer="jvm")

    result = run_export(dag, day=4)

    assert result.state == "success", result
    out, err = capfd.readouterr()
    assert "by the jvm writer" in out + err + caplog.text
    assert_exactly_once(protocol, bootstrap, topic, committed=ROWS, aborted=0)


def test_several_topics_registry_avro_tombstones_and_timestamps_through_a_plain_server(
    server, export_dag, run_export, make_topic, protocol, bootstrap, ledger, monkeypatch,
    registry,
):  # fmt: skip
    """What a user of a plain Connect server meets first: the TaskGroup with rows routed among
    two topics as registry Avro, tombstones and record timestamps, exactly once on each
    topic, every value read back through the registry's own deserializer."""
    from confluent_kafka import TIMESTAMP_CREATE_TIME
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from tests.integration.test_wire_formats import consume_all

    use_connect(monkeypatch, server)
    topics = [make_topic(2), make_topic(2)]
    base = (int(time.time()) - 3600) * 1000  # an hour ago: inside the topics' retention
    monkeypatch.setenv(
        "AIRFLOW_CONN_SCHEMA_REGISTRY_CONNECT",
        json.dumps({"conn_type": "http", "host": registry}),
    )
    dag = export_dag(
        topic=None,
        topic_column="kind",
        topics=topics,
        source={
            "sql": f"SELECT id AS order_id, concat('customer-', id % 17) AS customer, "
            f"IF(id % 2 = 0, '{topics[0]}', '{topics[1]}') AS kind, "
            f"timestamp_millis({base} + id) AS updated_at FROM range(0, {ROWS})"
        },
        registry_conn_id="schema_registry_connect",
        value_format={"record_name": "Order", "namespace": "shop"},
        tombstone_when="order_id % 5 = 0",
        timestamp_column="updated_at",
    )

    result = run_export(dag, day=2)

    assert result.state == "success", result
    client = SchemaRegistryClient({"url": registry})
    decode = AvroDeserializer(client)
    for index, topic in enumerate(topics):
        report, _ = assert_exactly_once(protocol, bootstrap, topic, committed=ROWS // 2, aborted=0)
        assert report.tombstones == ROWS // 10  # ids 0, 10, ... and 5, 15, ...
        for message in consume_all(bootstrap, topic, ROWS // 2):
            key = int(message.key())
            assert key % 2 == index
            assert message.timestamp() == (TIMESTAMP_CREATE_TIME, base + key)
            if key % 5 == 0:
                assert message.value() is None
                continue
            row = decode(message.value(), SerializationContext(topic, MessageField.VALUE))
            assert row["order_id"] == key and row["customer"] == f"customer-{key % 17}"


@pytest.mark.parametrize("case", EVERY_PATH)
def test_a_refusal_on_connect_fails_the_task_once_with_its_own_error(
    case, server, export_dag, run_export, make_topic, protocol, bootstrap, monkeypatch
):
    """As through spark-submit (test_job_errors): the prepare raises the refusal the job
    met, in the rows (the executors) or on the driver (this process), as itself and as
    Airflow's no-retry failure; the orchestrator's abort leaves nothing open."""
    use_connect(monkeypatch, server)
    options, words, *kind = CASES[case]
    topic = make_topic(2)
    RaisingPrepare.raised.clear()
    dag = export_dag(retries=2, operator_classes={"prepare": RaisingPrepare}, **options(topic))

    result = run_export(dag, day=5)

    prefix = default_id_prefix(f"{dag.dag_id}.{dagtest.GROUP_ID}")
    assert_refused_once(
        result,
        "prepare",
        RaisingPrepare.raised,
        words,
        *kind,
        protocol=protocol,
        bootstrap=bootstrap,
        topic=topic,
        prefix=prefix,
    )


def test_a_job_failure_on_connect_that_is_no_refusal_is_retried(
    server, export_dag, run_export, make_topic, protocol, bootstrap, monkeypatch
):
    """The other side of the same boundary: a job that fails for another reason (here a row
    the source itself cannot compute) raises :class:`PrepareError`, which no marker calls
    permanent: the task's ``retries`` decide, and each try's ids are aborted."""
    use_connect(monkeypatch, server)
    topic = make_topic(2)
    RaisingPrepare.raised.clear()
    broken = "IF(id = 7, CAST(raise_error('row 7 cannot be computed') AS STRING), 'x') AS note"
    dag = export_dag(
        topic=topic,
        retries=1,
        operator_classes={"prepare": RaisingPrepare},
        source=rows_with(broken),
    )

    result = run_export(dag, day=6)

    assert result.state == "failed", result
    assert result.tasks["prepare"] == "failed"
    assert result.tries["prepare"] == 2, result.tries  # retried once, as retries=1 says
    assert [type(e) for e in RaisingPrepare.raised] == [PrepareError, PrepareError]
    for error in RaisingPrepare.raised:
        assert not isinstance(error, AirflowFailException)
        assert str(error).startswith("the prepare job failed"), error
        assert "row 7 cannot be computed" in str(error), error  # its words, not its type
    prefix = default_id_prefix(f"{dag.dag_id}.{dagtest.GROUP_ID}")
    assert [t for t in protocol.list_transactions(prefix=prefix) if t.state == "Ongoing"] == []
    assert_exactly_once(protocol, bootstrap, topic, committed=0, open_=0)
