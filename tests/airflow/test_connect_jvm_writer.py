"""The JVM writer on a real Spark Connect server: our jar's DataSource ``kafka2pc``.

A server started with our jar and kafka-clients on ``--jars`` runs Kafka's Java producer in
its executors for a Connect client (``writer="auto"`` takes it); one without them gets them
shipped with the session (test_connect_artifacts). Witnesses as everywhere: the log's
markers (committed once, none open) and a read_committed consumer; plus where the server
could show the Kafka secret.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka2pc.coordination.finish import Coordinator
from airflow_provider_kafka2pc.coordination.recovery import recover
from airflow_provider_kafka2pc.defaults import GRACE_PERIOD
from airflow_provider_kafka2pc.errors import Kafka2pcError
from airflow_provider_kafka2pc.ledger import Ledger
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.protocol.described import CoordinatorTxnState
from airflow_provider_kafka2pc.spark import PROTOBUF_JAVA
from airflow_provider_kafka2pc.spark.alignment import JAR
from airflow_provider_kafka2pc.spark.connect import remote_session
from airflow_provider_kafka2pc.spark.jvm_writer import HOOK_PROPERTY, kafka_clients_jar
from airflow_provider_kafka2pc.spark.maven import fetch_jar
from airflow_provider_kafka2pc.spark.remote import prepare_remote_argv
from airflow_provider_kafka2pc.transaction.controller import TransactionController
from airflow_provider_kafka2pc.transaction.manifest import Manifest
from devtools.visible import read_committed
from tests.airflow.connect_cases import CASES, export_case
from tests.airflow.test_connect_options import assert_refused
from tests.airflow.test_export_connect import ui_pages
from tests.conftest import assert_exactly_once, audit, unique_id
from tests.support.connect import ConnectServer, connect_server
from tests.support.jvm_test_jar import fault_hook, jvm_test_jar

ROWS = 400


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    # The tests' jar too: its fault hook (the product jar has none); protobuf-java as a
    # Protobuf user starts it (shipped to a session, the server's copy of our jar, loaded by
    # its parent class loader, could not see it: the export is refused naming it).
    jars = [JAR, kafka_clients_jar(), jvm_test_jar(), fetch_jar(PROTOBUF_JAVA)]
    with connect_server(tmp_path_factory.mktemp("connect-jvm"), jars=jars) as running:
        yield running


def test_source_splits_are_refused_on_this_server_too_before_anything_is_written(
    server, settings, protocol, make_topic, tmp_path
):
    """The jars change the writer a Connect session gets, not its partitioning: source
    splits need a classic session here as on a plain server (test_connect_options)."""
    assert_refused(
        server, settings, protocol, make_topic(2), tmp_path, ["--no-shuffle"], "source-splits"
    )


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


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_option_on_a_server_with_the_jars_is_exactly_once_and_reads_back(
    server: ConnectServer,
    registry: str,
    settings: dict[str, Any],
    protocol: KafkaProtocol,
    bootstrap: str,
    make_topic,
    tmp_path: Path,
    case: str,
) -> None:
    """The plain server's cases (test_connect_artifacts) on this one: registry formats,
    keys, subject strategies, headers, tombstones, timestamps, partitionings and writers,
    with the server's own jars; nothing of ours shipped with the session."""
    _, jars = export_case(
        server.url,
        case,
        registry=registry,
        settings=settings,
        protocol=protocol,
        bootstrap=bootstrap,
        topic=make_topic(2),
        tmp_path=tmp_path,
        auto_takes="jvm",
        session_name="connect-jars-case",
    )
    assert not {"kafka2pc-spark.jar", "kafka-clients-4.4.0.jar"} & jars, jars


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


#: The prepare's client, run in a process of its own so that it can be SIGKILLed as a lost
#: Airflow task's process is: no session release, so the server runs the execution on.
CLIENT = """
import json, sys
from airflow_provider_kafka2pc.spark.connect import remote_session
from airflow_provider_kafka2pc.spark.jvm_writer import HOOK_PROPERTY
from airflow_provider_kafka2pc.spark.remote import prepare_remote_argv
run = json.loads(sys.argv[1])
with remote_session(run["url"], "connect-jvm-late") as spark:
    spark.conf.set(HOOK_PROPERTY, run["hook"])
    prepare_remote_argv(spark, run["argv"], run["settings"])
"""

#: How long each task waits before it opens: past the client's kill and the abort. Every
#: task, so that none opens before the abort: the abort's fence would fail that one's
#: write, and so the job, whose end (its own abort fence, the kill of the others) is not
#: what this test is about.
LATE_MS = 6_000


def test_a_task_opening_after_the_abort_is_closed_by_the_orchestrator_alone(
    server: ConnectServer,
    settings: dict[str, Any],
    protocol: KafkaProtocol,
    bootstrap: str,
    make_topic,
    tmp_path: Path,
) -> None:
    """The prepare's client dies while the server's job runs (kill -9: no session release,
    so Spark Connect keeps the execution for its detached timeout, 5 min by default); the
    orchestrator aborts the batch (the abort task's code: EndTxns, fences, the sweep); then
    the job's tasks open their transactions, late, write their rows and leave them open,
    as their job (unaware of any of this) tells them to. No fence by the test: the next
    recovery round fences them at once (their ids are back in the pool), and every row of
    the prepare is then in the log, aborted, and nothing holds a read_committed consumer."""
    topics = [make_topic(2), make_topic(2)]
    export_id, prefix = "connect-jvm-late", unique_id("connect-jvm-late")
    marker = tmp_path / "late.json"
    source = routed_rows(tmp_path / "rows.json", topics)
    controller = TransactionController(protocol)
    with Ledger(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        batch = ledger.begin(
            export_id, "run", topic=topics[0], topics=topics, id_prefix=prefix, num_partitions=2
        )
        ids = list(batch.transactional_ids)
        run = {
            "url": server.url,
            "hook": fault_hook(f"-1,{LATE_MS},-1,late,{marker}"),
            "argv": argv(source, tmp_path / "manifest.json", ids, topics),
            "settings": settings,
        }
        client = subprocess.Popen([sys.executable, "-c", CLIENT, json.dumps(run)])
        try:
            waited = _wait_for(marker.exists, 120, "a task to start waiting")
        finally:
            client.kill()
            client.wait(timeout=30)
        waiting_at = time.monotonic()
        aborted = Coordinator(ledger, controller).abort(export_id, "run", "the prepare died")
        assert aborted.late == (), aborted  # no task has opened anything yet
        assert time.monotonic() - waiting_at < LATE_MS / 1000, "the abort came too late"
        # The late tasks open after the abort (their InitProducerId past the abort's fence).
        _wait_for(lambda: all(_ongoing(protocol, t) for t in ids), 60, "the late tasks")
        opened_at = time.monotonic()
        # They write every row and leave them open (their prepare): consumers held back.
        _wait_for(lambda: _in_log(protocol, topics) == ROWS, 60, "the late tasks' rows")
        stalled = read_committed(settings, topics[0], timeout_s=2)
        assert stalled.stalled, stalled.to_dict()
        started = time.monotonic()
        report = recover(
            ledger, protocol, controller, export_id, [prefix], grace_period=GRACE_PERIOD
        )
        fenced_at = time.monotonic()
    for tid in ids:
        assert "a late opener, fenced at once" in report.fenced.get(tid, ""), report.to_dict()
        assert not _ongoing(protocol, tid)
    assert not report.left and not report.failed, report.to_dict()
    # Every row reached the log (the late tasks flushed them all) and every one is
    # aborted: the aborted-records witness holds exactly here.
    for i, topic in enumerate(topics):
        rows = len(range(i, ROWS, len(topics)))
        assert_exactly_once(protocol, bootstrap, topic, committed=0, aborted=rows)
    print(
        f"task waited {waited:.1f} s for; abort {aborted.seconds:.2f} s; late open seen "
        f"{opened_at - waiting_at:.1f} s after the abort began; the recovery round took "
        f"{fenced_at - started:.2f} s, run {started - opened_at:.1f} s after it was seen open"
    )


def _ongoing(protocol: KafkaProtocol, tid: str) -> bool:
    described = protocol.describe_transaction(tid)
    return described is not None and described.state is CoordinatorTxnState.ONGOING


def _in_log(protocol: KafkaProtocol, topics: list[str]) -> int:
    """Records of ``topics`` in the log, aborted or still open (none is committed here)."""
    totals = [audit(protocol, topic).totals for topic in topics]
    return sum(t["aborted"] + t["open"] for t in totals)


def _wait_for(done: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Seconds until ``done()``; fails after ``timeout_s``."""
    started = time.monotonic()
    while not done():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"waited {timeout_s} s for {what}")
        time.sleep(0.1)
    return time.monotonic() - started
