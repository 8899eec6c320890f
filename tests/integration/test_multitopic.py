"""Several topics in one export: a ``topic_column`` routes each row among ``topics``.

Real Spark (in-process local session), the real broker, and both witnesses on every topic:
the log's markers (our audit) and a read_committed consumer. Each participant's one
transaction spans the topics its rows go to, so the export commits or aborts as one.
"""

from __future__ import annotations

import json
import os
from contextlib import nullcontext

import pytest
from pyspark.sql import SparkSession

from airflow_provider_kafka2pc import naming
from airflow_provider_kafka2pc.coordination.finish import Coordinator
from airflow_provider_kafka2pc.errors import ConfigurationError, PrepareError
from airflow_provider_kafka2pc.ledger import BatchState, Ledger
from airflow_provider_kafka2pc.spark import prepare_dataframe
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from airflow_provider_kafka2pc.transaction.manifest import ALIGNED, HASH, Manifest
from tests.conftest import assert_exactly_once, audit, cli, unique_id
from tests.support.spark import PYTHON_ENV, QUIET_CONF

from .test_spark_prepare import assert_nothing_written, jvm_fault

ROWS = 6_000
WRITERS = pytest.mark.parametrize("writer", ["python", "jvm"])


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    os.environ.update(PYTHON_ENV)
    builder = SparkSession.builder.master("local[2,4]")
    for key, value in QUIET_CONF.items():
        builder = builder.config(key, value)
    session = builder.config("spark.sql.execution.arrow.maxRecordsPerBatch", "500").getOrCreate()
    yield session
    session.stop()


def ids(count: int) -> list[str]:
    run = unique_id("multi")
    return [f"{run}-{i}" for i in range(count)]


def routed(spark: SparkSession, topics: list[str], rows: int = ROWS):
    """Row ``id`` goes to ``topics[id % len(topics)]``."""
    df = spark.range(rows).selectExpr("id", "concat('customer-', id % 977) AS customer")
    names = ", ".join(f"'{t}'" for t in topics)
    return df.selectExpr(
        "*", f"element_at(array({names}), CAST(id % {len(topics)} + 1 AS INT)) AS to"
    )


def per_topic(topics: list[str], rows: int = ROWS) -> dict[str, int]:
    return {t: len(range(i, rows, len(topics))) for i, t in enumerate(topics)}


def assert_once_per_topic(protocol, bootstrap, batch: Manifest, expected: dict[str, int]) -> None:
    """Both witnesses on every topic: its rows committed once, nothing open."""
    for topic, rows in expected.items():
        report, seen = assert_exactly_once(
            protocol, bootstrap, topic, *batch.committables, committed=rows
        )
        assert report.duplicates["committed_keys"] == rows
        assert len(seen.keys) == rows


@WRITERS
def test_rows_routed_among_topics_commit_exactly_once_per_topic(
    spark, settings, bootstrap, protocol, make_topic, writer, tmp_path
):
    """Three topics (4, 4 and 2 partitions) and 2 participants: aligned, since every
    topic's partition count is a multiple of 2; each transaction spans all three topics.
    ``kafka2pc audit`` given the manifest audits every topic it names."""
    topics = [make_topic(4), make_topic(4), make_topic(2)]
    leased = ids(2)
    batch = prepare_dataframe(
        routed(spark, topics),
        topic_column="to",
        topics=topics,
        transactional_ids=leased,
        producer_config=settings,
        key_column="id",
        writer=writer,
    )
    assert batch.topics == tuple(topics) and batch.topic == topics[0]
    assert batch.metadata["topic_column"] == "to"
    assert batch.metadata["partitioning"] == ALIGNED, batch.metadata
    assert batch.source_rows == batch.record_count == ROWS
    assert batch.records_per_topic() == per_topic(topics)
    for index, committable in enumerate(batch.committables):
        assert {p.topic for p in committable.partitions} == set(topics)  # one txn, 3 topics
        assert all(p.partition % 2 == index for p in committable.partitions), committable
    again = Manifest.from_json(batch.to_json())
    assert again.topics == batch.topics and again.committables == batch.committables
    for topic in topics:  # open in every topic until the commit
        assert audit(protocol, topic, *batch.committables).totals["open"] > 0

    outcomes = TransactionController(protocol).commit_all(batch.committables)
    assert {r.outcome for r in outcomes} == {Outcome.COMMITTED}
    assert_once_per_topic(protocol, bootstrap, batch, per_topic(topics))
    manifest = tmp_path / "manifest.json"
    manifest.write_text(batch.to_json())
    done = cli("audit", "-b", bootstrap, "--committables", str(manifest))
    assert done.returncode == 0, done.stderr
    reports = json.loads(done.stdout)["topics"]
    assert {t: r["totals"]["committed"] for t, r in reports.items()} == per_topic(topics)
    assert all(r["totals"]["open"] == r["totals"]["aborted"] == 0 for r in reports.values())


@WRITERS
def test_a_failing_participant_leaves_nothing_visible_in_any_topic(
    spark, settings, bootstrap, protocol, make_topic, writer, tmp_path
):
    """The prepare fails after other participants prepared into both topics; the
    coordinator's own abort (what the export's abort task runs: verdict ABORT, then every
    leased id without a committable fenced) leaves nothing visible or open in any topic.
    The test fences nothing itself."""
    topics = [make_topic(2), make_topic(3)]
    export, run = unique_id("multi-export"), "2026-11-01"
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    batch = ledger.begin(
        export,
        run,
        topic=topics[0],
        topics=topics,
        id_prefix=naming.default_prefix(export),
        num_partitions=3,
    )
    leased = list(batch.transactional_ids)

    def partition_2_always_fails(partition: int, attempt: int, rows: int) -> None:
        if partition == 2:
            raise RuntimeError("injected: partition 2 cannot be written")

    fault = jvm_fault(spark, "2,500,-1,fail") if writer == "jvm" else nullcontext()
    with fault, pytest.raises(PrepareError, match="abort \\(fence\\) this run's ids"):
        prepare_dataframe(
            routed(spark, topics),
            topic_column="to",
            topics=topics,
            transactional_ids=leased,
            producer_config=settings,
            key_column="id",
            on_batch=partition_2_always_fails if writer == "python" else None,
            writer=writer,
        )
    assert sum(audit(protocol, t).totals["open"] for t in topics) > 0  # others had prepared
    with ledger:
        finished = Coordinator(ledger, TransactionController(protocol)).abort(
            export, run, "the prepare failed"
        )
    assert finished.batch.state is BatchState.ABORTED
    assert sorted(finished.fenced) == sorted(leased)  # no committable was recorded
    for topic in topics:
        report, _ = assert_exactly_once(protocol, bootstrap, topic, committed=0)
        assert report.totals["aborted"] > 0, report.to_dict()  # each topic had records


def test_an_aborted_prepared_export_leaves_nothing_visible(
    spark, settings, bootstrap, protocol, make_topic
):
    """The abort path is the same EndTxn per participant: every topic's records go."""
    topics = [make_topic(2), make_topic(2)]
    batch = prepare_dataframe(
        routed(spark, topics),
        topic_column="to",
        topics=topics,
        transactional_ids=ids(2),
        producer_config=settings,
        key_column="id",
    )
    outcomes = TransactionController(protocol).abort_all(batch.committables)
    assert {r.outcome for r in outcomes} == {Outcome.ABORTED}
    for topic, rows in per_topic(topics).items():
        assert_exactly_once(
            protocol, bootstrap, topic, *batch.committables, committed=0, aborted=rows
        )


@WRITERS
@pytest.mark.parametrize("bad", ["elsewhere", None], ids=["undeclared", "null"])
def test_a_row_routed_to_an_undeclared_topic_is_refused_with_nothing_open(
    spark, settings, bootstrap, protocol, make_topic, writer, bad
):
    topics = [make_topic(2), make_topic(2)]
    named = f"'{bad}'" if bad else "NULL"
    df = routed(spark, topics, 200).selectExpr(
        "id", "customer", f"CASE WHEN id = 150 THEN {named} ELSE to END AS to"
    )
    with pytest.raises(ConfigurationError, match="not among topics") as refused:
        prepare_dataframe(
            df,
            topic_column="to",
            topics=topics,
            transactional_ids=ids(2),
            producer_config=settings,
            key_column="id",
            writer=writer,
        )
    assert f"names topic {bad or 'null'} in some rows" in str(refused.value)
    for topic in topics:
        assert_nothing_written(protocol, bootstrap, topic)


@pytest.mark.parametrize("align", [True, False], ids=["aligned", "by-hash"])
def test_a_missing_topic_is_refused_before_anything_opens(
    spark, settings, bootstrap, protocol, make_topic, align
):
    present = make_topic(2)
    topics = [present, "no-such-topic-here"]
    with pytest.raises(ConfigurationError, match=r"'no-such-topic-here'.*create it first"):
        prepare_dataframe(
            routed(spark, topics, 100),
            topic_column="to",
            topics=topics,
            transactional_ids=ids(2),
            producer_config=settings,
            key_column="id",
            align_with_kafka=align,
        )
    assert_nothing_written(protocol, bootstrap, present)


def test_alignment_needs_every_topic_to_allow_it_and_names_the_one_that_does_not(
    spark, settings, bootstrap, protocol, make_topic
):
    topics = [make_topic(4), make_topic(3)]
    batch = prepare_dataframe(
        routed(spark, topics, 1_000),
        topic_column="to",
        topics=topics,
        transactional_ids=ids(2),
        producer_config=settings,
        key_column="id",
        align_with_kafka=True,
    )
    assert batch.metadata["partitioning"] == HASH
    # auto first says why not source splits (a generated source), then why not aligned
    assert batch.metadata["partitioning_reason"].endswith(
        f"topic {topics[1]!r}'s 3 partitions are not a multiple of the 2 Spark partitions"
    )
    TransactionController(protocol).commit_all(batch.committables)
    assert_once_per_topic(protocol, bootstrap, batch, per_topic(topics, 1_000))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"topic": "a", "topic_column": "to", "topics": ["a"]}, "exactly one of topic"),
        ({}, "exactly one of topic"),
        ({"topic_column": "to"}, "needs topics"),
        ({"topic_column": "to", "topics": ["a", "a"]}, "twice"),
        ({"topic_column": "to", "topics": ["a b"]}, "Kafka topic name"),
        ({"topic_column": "id", "topics": ["T"]}, "topic column 'id' has type bigint"),
        ({"topic_column": "nope", "topics": ["T"]}, "topic column 'nope' is not in"),
    ],
)
def test_bad_routing_is_refused_before_anything_opens(
    spark, settings, bootstrap, protocol, topic, kwargs, message
):
    if kwargs.get("topics") == ["T"]:
        kwargs = {**kwargs, "topics": [topic]}
    with pytest.raises(ConfigurationError, match=message):
        prepare_dataframe(
            spark.range(3).selectExpr("id", "'a' AS to"),
            transactional_ids=ids(1),
            producer_config=settings,
            align_with_kafka=False,
            **kwargs,
        )
    assert_nothing_written(protocol, bootstrap, topic)
