"""The export through spark-submit in cluster deploy mode on a Spark standalone master.

One standalone master (its REST server on: the Spark provider's hook polls a cluster-mode
driver's status there) and two one-core workers for the module (tests/support/spark.py).
The ``spark`` connection names the master with ``{"deploy-mode": "cluster"}``: spark-submit
returns once the driver is submitted to a worker, and the task waits on the driver's
status (``compat.submit_and_wait``). Spark refuses a Python application in this mode, so
the hook submits Spark's ``PythonRunner`` with the project's jar (hooks/spark_job.py).

The driver runs in a worker's directory, on this machine: the manifest, the failure
document and the private ``--spec-file``/``--kafka-config-file`` files are reached by their
local absolute paths (a real cluster needs them on storage every node sees: docs/operators.md).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka2pc import compat
from airflow_provider_kafka2pc.errors import ConfigurationError
from airflow_provider_kafka2pc.export import default_id_prefix
from airflow_provider_kafka2pc.hooks.spark_job import PYTHON_RUNNER
from airflow_provider_kafka2pc.ledger import BatchState, ParticipantState
from airflow_provider_kafka2pc.spark.export_spec import ExportSpec
from airflow_provider_kafka2pc.transaction.manifest import SOURCE
from airflow_provider_kafka2pc.version_compat import AirflowFailException
from devtools.broker.node import free_port
from tests.airflow import dagtest
from tests.airflow.test_job_errors import CASES, RaisingPrepare
from tests.airflow.test_loss_repair import write_orders
from tests.conftest import assert_exactly_once
from tests.faults.conftest import QUICK_SPARK
from tests.integration.test_wire_formats import consume_all
from tests.support.readback import read_back
from tests.support.spark import standalone_cluster

pytestmark = pytest.mark.slow

ROWS = 400
#: The driver takes a worker's one core and up to its 1 GB: the executor gets the other.
CLUSTER_SPARK = {
    **QUICK_SPARK,
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
}


class Cluster:
    """The module's standalone cluster: its master URL, REST port and directories."""

    def __init__(self, master: str, rest_port: int, logs: Path) -> None:
        self.master = master
        self.rest_port = rest_port
        self.logs = logs

    def connection_env(self) -> dict[str, str]:
        value = {
            "conn_type": "spark",
            "host": self.master,
            "extra": {"deploy-mode": "cluster", "rest-port": self.rest_port},
        }
        return {f"AIRFLOW_CONN_{dagtest.SPARK_CONN_ID.upper()}": json.dumps(value)}

    def drivers(self) -> list[Path]:
        """The drivers' directories on the workers, oldest first."""
        return sorted((self.logs / "work").glob("driver-*"))

    def driver_removed_at(self, driver_id: str) -> float:
        """When the master saw the driver end (its log line; second resolution)."""
        for line in (self.logs / "master.log").read_text().splitlines():
            if f"Removing driver: {driver_id}" in line:
                stamp = datetime.strptime(line[:17], "%y/%m/%d %H:%M:%S")
                return stamp.timestamp()
        raise AssertionError(f"the master log has no end of {driver_id}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    logs = tmp_path_factory.mktemp("spark-cluster-mode")
    rest_port = free_port()
    with standalone_cluster(workers=2, log_dir=logs, rest_port=rest_port) as master:
        yield Cluster(master, rest_port, logs)


@pytest.fixture
def submissions(
    cluster: Cluster, spark_connection: str, monkeypatch: pytest.MonkeyPatch
) -> list[dict[str, Any]]:
    """The ``spark`` connection on the cluster in cluster mode (in place of the tier's
    ``local[2]``, set before); each submission's facts, as the hook that tracked its
    driver knew them."""
    for key, value in cluster.connection_env().items():
        monkeypatch.setenv(key, value)
    seen: list[dict[str, Any]] = []
    wait = compat.submit_and_wait

    def spy(hook: Any, application: str) -> None:
        facts: dict[str, Any] = {"application": application, "began": time.time()}
        seen.append(facts)
        try:
            wait(hook, application)
        finally:
            facts.update(
                returned=time.time(),
                java_class=hook._java_class,
                args=list(hook._application_args),
                deploy_mode=hook._connection["deploy_mode"],
                driver_id=hook._driver_id,
                driver_status=hook._driver_status,
            )

    monkeypatch.setattr(compat, "submit_and_wait", spy)
    return seen


def _one_driver_run(cluster: Cluster, submissions: list[dict[str, Any]]) -> dict[str, Any]:
    """The one submission: a tracked driver that ran on a worker, by Spark's Python runner."""
    [facts] = submissions
    assert facts["deploy_mode"] == "cluster" and facts["java_class"] == PYTHON_RUNNER, facts
    assert facts["application"].endswith("kafka2pc-spark.jar"), facts
    assert facts["args"][0].endswith("/spark/app.py"), facts
    assert re.fullmatch(r"driver-[0-9-]+", facts["driver_id"] or ""), facts
    assert (cluster.logs / "work" / facts["driver_id"]).is_dir(), cluster.drivers()
    # The private settings files were read by the driver by their local paths, and are gone.
    for flag in ("--spec-file", "--kafka-config-file"):
        assert not Path(facts["args"][facts["args"].index(flag) + 1]).exists()
    lag = facts["returned"] - cluster.driver_removed_at(facts["driver_id"])
    print(
        f"\n{facts['driver_id']}: {facts['driver_status']}; task waited "
        f"{facts['returned'] - facts['began']:.0f} s from spark-submit to the tracked end, "
        f"{lag:.1f} s after the master saw the driver end (1-s log stamps)"
    )
    return facts


def _committed_participants(
    result: Any, cluster: Cluster, submissions: list[dict[str, Any]], ledger: Any
) -> list[Any]:
    """The run's participants, once it succeeded, its one driver ran on a worker and
    finished, and both participants committed."""
    assert result.state == "success", result
    assert _one_driver_run(cluster, submissions)["driver_status"] == "FINISHED"
    prepared = result.xcom("prepare")
    with ledger.open() as store:
        parts = store.participants(prepared["export_id"], prepared["run_key"])
    assert [p.state for p in parts] == [ParticipantState.COMMITTED] * 2
    return parts


def test_cluster_deploy_mode_with_registry_avro_values_and_keys_commits_exactly_once(
    cluster, submissions, export_dag, run_export, make_topic, protocol, bootstrap, ledger,
    registry, monkeypatch,
):  # fmt: skip
    """Registry Avro values and keys (Spark's ``to_avro``, from the spark-avro package) in
    the executors of a driver on a worker. Spark's launcher of that driver puts
    ``--packages`` on the driver's class path only; every executor failed to deserialise
    its tasks until the driver handed the packages on (spark/cluster_packages.py)."""
    topic = make_topic(2)
    monkeypatch.setenv(
        "AIRFLOW_CONN_SCHEMA_REGISTRY_CLUSTER", json.dumps({"conn_type": "http", "host": registry})
    )
    options: dict[str, Any] = {"key_column": "id", "key_format": {}, "value_format": {}}
    dag = export_dag(
        topic=topic,
        source={"sql": f"SELECT id, concat('customer-', id % 97) AS customer FROM range({ROWS})"},
        registry_conn_id="schema_registry_cluster",
        spark_conf=CLUSTER_SPARK,
        **options,
    )

    result = run_export(dag, day=7)

    assert result.tasks == {
        "recover": "success",
        "prepare": "success",
        "decide": "success",
        "commit": "success",
        "abort": "skipped",
    }, result
    assert result.tries["prepare"] == 1, result.tries
    prepared = result.xcom("prepare")
    assert prepared["records"] == prepared["source_rows"] == ROWS
    with ledger.open() as store:
        assert store.get(prepared["export_id"], prepared["run_key"]).state is BatchState.COMMITTED
    parts = _committed_participants(result, cluster, submissions, ledger)
    committables = [p.committable for p in parts]
    assert_exactly_once(protocol, bootstrap, topic, *committables, committed=ROWS, aborted=0)
    spec = ExportSpec(topic=topic, **options)
    read_back(spec, registry, consume_all(bootstrap, topic, ROWS), topic, range(ROWS), 0)


def test_cluster_deploy_mode_writes_each_source_split_with_a_value_column(
    cluster, submissions, export_dag, run_export, make_topic, protocol, bootstrap, ledger,
    tmp_path,
):  # fmt: skip
    """The spec's source splits (no shuffle: a transaction per file) and a value column,
    with the writer ``auto`` takes, in the executors of a driver on a worker: the driver
    reads the files by their local paths (one machine: a real cluster needs storage every
    node sees)."""
    topic = make_topic(2)
    source = tmp_path / "orders"
    source.mkdir()
    for f in range(2):
        write_orders(source / f"part-{f}.json", range(f * ROWS // 2, (f + 1) * ROWS // 2))
    dag = export_dag(
        topic=topic,
        source={"path": str(source), "format": "json"},
        value_column="customer",
        partitioning=SOURCE,
        spark_conf=CLUSTER_SPARK,
    )

    result = run_export(dag, day=12)

    parts = _committed_participants(result, cluster, submissions, ledger)
    prepared = result.xcom("prepare")
    with ledger.open() as store:
        assert store.get(prepared["export_id"], prepared["run_key"]).partitioning == SOURCE
    assert [p.committable.record_count for p in parts] == [ROWS // 2] * 2  # a file each
    committables = [p.committable for p in parts]
    assert_exactly_once(protocol, bootstrap, topic, *committables, committed=ROWS, aborted=0)
    values = {int(m.key()): m.value() for m in consume_all(bootstrap, topic, ROWS)}
    assert values == {i: f"c-{i % 7}".encode() for i in range(ROWS)}


def test_cluster_deploy_mode_with_every_wire_option_commits_every_topic_once(
    cluster, submissions, export_dag, run_export, make_topic, protocol, bootstrap, ledger,
    registry, monkeypatch,
):  # fmt: skip
    """The options a driver on a worker must carry (docs/matrix.md's cluster-mode column)
    in one run: rows routed among two topics, registry JSON Schema values named by topic
    and record, a header column, tombstones, record timestamps, hash partitioning and the
    Python writer. The registry's settings reach the driver in their private file; every
    record reads back against the registry."""
    topics = [make_topic(2), make_topic(2)]
    base = (int(time.time()) - 3600) * 1000  # an hour ago: inside the topics' retention
    monkeypatch.setenv(
        "AIRFLOW_CONN_SCHEMA_REGISTRY_CLUSTER", json.dumps({"conn_type": "http", "host": registry})
    )
    options: dict[str, Any] = {
        "value_format": {"schema_type": "JSON", "record_name": "Row", "namespace": "shop"}
        | {"subject_name_strategy": "topic_record_name"},
        "header_columns": ["origin"],
        "tombstone_when": "id % 5 = 0",
        "timestamp_column": "ms",
        "partitioning": "hash",
        "writer": "python",
    }
    dag = export_dag(
        topic=None,
        topic_column="kind",
        topics=topics,
        source={
            "sql": "SELECT id AS order_id, id, concat('customer-', id % 97) AS customer, "
            f"IF(id % 2 = 0, 'even', NULL) AS origin, {base} + id AS ms, "
            f"IF(id % 2 = 0, '{topics[0]}', '{topics[1]}') AS kind FROM range(0, {ROWS})"
        },
        registry_conn_id="schema_registry_cluster",
        spark_conf=CLUSTER_SPARK,
        **options,
    )

    result = run_export(dag, day=10)

    parts = _committed_participants(result, cluster, submissions, ledger)
    for index, topic in enumerate(topics):
        report, _ = assert_exactly_once(
            protocol, bootstrap, topic, *[p.committable for p in parts], committed=ROWS // 2
        )
        assert report.tombstones == ROWS // 10  # ids 0, 10, ... and 5, 15, ...
        spec = ExportSpec(topic=topic, key_column="order_id", **options)
        messages = consume_all(bootstrap, topic, ROWS // 2)
        read_back(spec, registry, messages, topic, range(index, ROWS, 2), base)


def test_cluster_deploy_mode_with_registry_protobuf_and_the_jvm_writer_commits_once(
    cluster, submissions, export_dag, run_export, make_topic, protocol, bootstrap, ledger,
    registry, monkeypatch,
):  # fmt: skip
    """The rest of the cluster-mode column: registry Protobuf values (the subject named by
    the record) and keys, participants aligned with Kafka's partitions, and the JVM writer
    asked for by name, in the executors of a driver that runs on a worker. Every record
    reads back through ProtobufDeserializer against the registry."""
    topic = make_topic(2)
    monkeypatch.setenv(
        "AIRFLOW_CONN_SCHEMA_REGISTRY_CLUSTER", json.dumps({"conn_type": "http", "host": registry})
    )
    options: dict[str, Any] = {
        "key_column": "k",
        "key_format": {"schema_type": "PROTOBUF"},
        # Its own record: a subject holds one schema type, and others here name shop.Row.
        "value_format": {"schema_type": "PROTOBUF", "record_name": "ClusterRow"}
        | {"namespace": "shop", "subject_name_strategy": "record_name"},
        "partitioning": "kafka-aligned",
        "writer": "jvm",
    }
    dag = export_dag(
        topic=topic,
        source={  # the reader's field numbers: customer 1, id 2
            "sql": "SELECT concat('customer-', id % 97) AS customer, id, "
            f"named_struct('id', id) AS k FROM range(0, {ROWS})"
        },
        registry_conn_id="schema_registry_cluster",
        spark_conf=CLUSTER_SPARK,
        **options,
    )

    result = run_export(dag, day=11)

    parts = _committed_participants(result, cluster, submissions, ledger)
    committables = [p.committable for p in parts]
    for i, committable in enumerate(committables):  # participant i owns partition i
        assert {r.partition for r in committable.partitions} == {i}, committable.partitions
    assert_exactly_once(protocol, bootstrap, topic, *committables, committed=ROWS, aborted=0)
    spec = ExportSpec(topic=topic, **options)
    read_back(spec, registry, consume_all(bootstrap, topic, ROWS), topic, range(ROWS), 0)


def test_cluster_deploy_mode_refusal_fails_the_task_once_with_its_own_error(
    cluster, submissions, export_dag, run_export, make_topic, protocol, bootstrap
):
    options, words = CASES["undeclared topic in a row"]
    topic = make_topic(2)
    RaisingPrepare.raised.clear()
    dag = export_dag(
        retries=2,
        spark_conf=CLUSTER_SPARK,
        operator_classes={"prepare": RaisingPrepare},
        **options(topic),
    )

    result = run_export(dag, day=8)

    assert result.state == "failed", result
    assert result.tasks["prepare"] == "failed"
    assert result.tries["prepare"] == 1, result.tries  # permanent: no retry of retries=2
    facts = _one_driver_run(cluster, submissions)
    assert facts["driver_status"] == "FAILED"
    # The job's own error, read from the failure document the driver wrote on the worker.
    [raised] = RaisingPrepare.raised
    assert isinstance(raised, ConfigurationError) and isinstance(raised, AirflowFailException)
    assert type(raised).__name__ == "ConfigurationError"
    assert words in str(raised) and not str(raised).startswith("Driver"), raised
    assert f"driver {facts['driver_id']}; its log is in that driver's directory" in str(raised)
    prefix = default_id_prefix(f"{dag.dag_id}.{dagtest.GROUP_ID}")
    assert [t for t in protocol.list_transactions(prefix=prefix) if t.state == "Ongoing"] == []
    assert_exactly_once(protocol, bootstrap, topic, committed=0, open_=0)


def _no_rest_server(value: dict[str, Any]) -> None:
    value["extra"]["rest-port"] = free_port()  # nothing listens there


def _two_masters(value: dict[str, Any]) -> None:
    """A master list (high availability): the Spark provider then polls with
    ``spark-submit --status``, which no standalone master answers (apache/airflow#71881)."""
    value["host"] = f"{value['host']},127.0.0.1:{free_port()}"


@pytest.mark.parametrize(
    ("change", "words"),
    [(_no_rest_server, "REST server"), (_two_masters, "spark-submit --status")],
    ids=["rest server unreachable", "polled by spark-submit --status"],
)
def test_cluster_deploy_mode_without_status_polling_submits_nothing(
    change,
    words,
    cluster,
    submissions,
    export_dag,
    run_export,
    make_topic,
    protocol,
    bootstrap,
    monkeypatch,
):
    """The hook polls a cluster-mode driver's status on the master's REST server (off by
    default): unreachable, the task used to fail after ten missed polls while the driver it
    had submitted went on and left its transactions open. Now nothing is submitted."""
    name = f"AIRFLOW_CONN_{dagtest.SPARK_CONN_ID.upper()}"
    value = json.loads(cluster.connection_env()[name])
    change(value)
    monkeypatch.setenv(name, json.dumps(value))
    drivers = cluster.drivers()
    topic = make_topic(2)
    RaisingPrepare.raised.clear()
    dag = export_dag(
        topic=topic,
        retries=2,
        spark_conf=CLUSTER_SPARK,
        operator_classes={"prepare": RaisingPrepare},
    )

    result = run_export(dag, day=9)

    assert result.tasks["prepare"] == "failed" and result.tries["prepare"] == 1, result
    [raised] = RaisingPrepare.raised
    assert isinstance(raised, ConfigurationError), raised
    assert words in str(raised) and "nothing was submitted" in str(raised), raised
    assert [f["driver_id"] for f in submissions] == [None] and cluster.drivers() == drivers
    prefix = default_id_prefix(f"{dag.dag_id}.{dagtest.GROUP_ID}")
    assert [t for t in protocol.list_transactions(prefix=prefix) if t.state == "Ongoing"] == []
    assert_exactly_once(protocol, bootstrap, topic, committed=0, open_=0)
