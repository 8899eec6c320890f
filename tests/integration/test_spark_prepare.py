"""Spark prepare: every Spark partition becomes one prepared transaction, committed elsewhere.

Real Spark (an in-process local session, spark-submit, a standalone cluster), the real
broker, and the final state of every test checked by two witnesses: the log's markers
(our audit) and a read_committed consumer. Runs on the default Kafka version only, but
for the JVM writer's transaction versions (4.4.0 and 3.9.2). Tests marked ``WRITERS`` run
with each writer (confluent-kafka in Python workers, Kafka's Java producer in the
executors: docs/jvm-writer.md).
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, TopicPartition
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_provider_kafka2pc.errors import ConfigurationError, PrepareError
from airflow_provider_kafka2pc.protocol.described import CoordinatorTxnState
from airflow_provider_kafka2pc.spark import class_sharing, prepare_dataframe
from airflow_provider_kafka2pc.spark.alignment import (
    KEY_HASH_FUNCTION,
    Alignment,
    proxies,
    register_key_hash,
)
from airflow_provider_kafka2pc.spark.class_sharing import driver_archive
from airflow_provider_kafka2pc.spark.compilation import THRESHOLDS
from airflow_provider_kafka2pc.spark.job import spark_submit_binary
from airflow_provider_kafka2pc.spark.jvm_writer import (
    HOOK_PROPERTY,
    ensure_on_classpath,
    jvm_write,
    producer_settings,
)
from airflow_provider_kafka2pc.spark.maven import java_binary
from airflow_provider_kafka2pc.spark.prepare import Repair
from airflow_provider_kafka2pc.spark.prepare import _check_topic as check_topic
from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from airflow_provider_kafka2pc.transaction.manifest import ALIGNED, Manifest
from airflow_provider_kafka2pc.transaction.native_writer import partition_for_key
from devtools.broker import DEFAULT_KAFKA_VERSION
from devtools.spark_submit import submit_prepare as spark_submit_prepare
from tests.conftest import assert_exactly_once, audit, cli, unique_id
from tests.support.jvm_test_jar import fault_hook, jvm_test_jar
from tests.support.spark import PYTHON_ENV, QUIET_CONF, standalone_cluster

ROWS = 20_000
#: The tests that run with each writer: confluent-kafka in Python workers, Kafka's Java
#: producer in the executors.
WRITERS = pytest.mark.parametrize("writer", ["python", "jvm"])


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    os.environ.update(PYTHON_ENV)
    builder = SparkSession.builder.master("local[2,4]")  # 2 cores, up to 4 attempts a task
    for key, value in QUIET_CONF.items():
        builder = builder.config(key, value)
    session = builder.config("spark.sql.execution.arrow.maxRecordsPerBatch", "1000").getOrCreate()
    yield session
    session.stop()


def ids(count: int) -> list[str]:
    run = unique_id("run")
    return [f"{run}-{i}" for i in range(count)]


def source(spark: SparkSession, rows: int = ROWS):
    return spark.range(rows).selectExpr(
        "id", "concat('customer-', id % 977) AS customer", "CAST(id * 1.5 AS DOUBLE) AS amount"
    )


@contextmanager
def jvm_fault(spark: SparkSession, fault: str):
    """The tests' fault hook on the JVM writer (``partition,rows,attempts,die|fail``),
    from the tests' own jar, added to the session (the product jar has no fault)."""
    spark.sql(f"ADD JAR '{jvm_test_jar()}'")
    spark.sparkContext.setLocalProperty(HOOK_PROPERTY, fault_hook(fault))
    try:
        yield
    finally:
        spark.sparkContext.setLocalProperty(HOOK_PROPERTY, None)


def commit_all(protocol, batch: Manifest) -> list[Outcome]:
    return [r.outcome for r in TransactionController(protocol).commit_all(batch.committables)]


def assert_rows_once(protocol, bootstrap, topic, batch: Manifest, rows: int, **expected):
    """Both witnesses: ``rows`` committed once each (one key per row), nothing open."""
    report, seen = assert_exactly_once(
        protocol, bootstrap, topic, *batch.committables, committed=rows, **expected
    )
    assert report.duplicates["committed_keys"] == rows
    assert len(seen.keys) == rows
    return report


@WRITERS
def test_every_partition_prepares_one_transaction(
    spark, settings, bootstrap, protocol, make_topic, writer
):
    topic = make_topic(4)
    leased = ids(8)
    batch = prepare_dataframe(
        source(spark),
        topic=topic,
        transactional_ids=leased,
        producer_config=settings,
        key_column="id",
        writer=writer,
    )
    assert batch.metadata["writer"] == writer
    assert [c.transactional_id for c in batch.committables] == leased
    assert batch.source_rows == batch.record_count == ROWS
    assert [c.record_count for c in batch.committables] == list(batch.partition_rows)
    assert all(c.start_time_ms >= batch.metadata["started_ms"] for c in batch.committables)
    assert audit(protocol, topic, *batch.committables).totals["open"] == ROWS

    assert set(commit_all(protocol, batch)) == {Outcome.COMMITTED}
    assert_rows_once(protocol, bootstrap, topic, batch, ROWS, aborted=0)


def test_membership_is_stable_across_recomputation(
    spark, settings, bootstrap, protocol, make_topic
):
    """A recomputed partition holds the same records: the re-write of a lost one relies on it."""
    topic = make_topic(2)
    first = prepare_dataframe(
        source(spark),
        topic=topic,
        transactional_ids=ids(6),
        producer_config=settings,
        key_column="id",
    )
    again = prepare_dataframe(
        source(spark).orderBy("amount"),
        topic=topic,
        transactional_ids=ids(6),
        producer_config=settings,
        key_column="id",
    )
    assert first.partition_rows == again.partition_rows
    keyless = [
        prepare_dataframe(
            source(spark, 5000), topic=topic, transactional_ids=ids(3), producer_config=settings
        )
        for _ in range(2)
    ]
    assert keyless[0].partition_rows == keyless[1].partition_rows
    controller = TransactionController(protocol)
    aborted = [c for batch in (first, again, *keyless) for c in batch.committables]
    assert {r.outcome for r in controller.abort_all(aborted)} == {Outcome.ABORTED}
    assert_exactly_once(
        protocol, bootstrap, topic, *aborted, committed=0, aborted=2 * ROWS + 2 * 5000
    )


def test_the_jvm_key_hash_puts_every_key_where_java_does(spark):
    """The shipped Java UDF (registered into a session started without its jar, as a user's
    would be) gives Kafka's partition of every key length 0-40 (each murmur2 tail), and the
    owner column maps it to the proxy of Spark partition ``p mod N``, ``p`` its partition
    among 8 (among any multiple of N alike: the owner does not depend on the topic's size)."""
    assert register_key_hash(spark) is None
    rng = random.Random(939)
    keys = [bytes(rng.randrange(256) for _ in range(n % 41)) for n in range(2000)]
    df = spark.createDataFrame([(k,) for k in keys] + [(None,)], "k binary")
    counts = (1, 3, 8, 64)
    rows = df.select(
        "k",
        *[(F.call_udf(KEY_HASH_FUNCTION, "k") % n).alias(f"p{n}") for n in counts],
        Alignment(spark_partitions=4).owner_column(F.col("k")).alias("o"),
    ).collect()
    table = proxies(4)
    for row in rows:
        if row.k is None:
            assert (row.p1, row.p8, row.o) == (None, None, None)
            continue
        key = bytes(row.k)
        assert [row[f"p{n}"] for n in counts] == [partition_for_key(key, n) for n in counts]
        assert row.o == table[partition_for_key(key, 8) % 4]
    assert len(rows) == len(keys) + 1


def test_kafka_aligned_partitions_each_own_their_kafka_partitions(
    spark, settings, bootstrap, protocol, make_topic
):
    """With align_with_kafka, transaction i writes only the Kafka partitions p = i mod N
    (fewer, fuller batches), each key still lands where Java puts it, membership survives
    recomputation, and null keys (allowed here) fall back to the row's hash."""
    topic = make_topic(8)
    keyed = source(spark).selectExpr(
        "CASE WHEN id % 10 = 0 THEN NULL ELSE id END AS k", "customer", "amount"
    )

    def prepare(df):
        return prepare_dataframe(
            df,
            topic=topic,
            transactional_ids=ids(4),
            producer_config=settings,
            key_column="k",
            require_keys=False,
            align_with_kafka=True,
        )

    batch, again = prepare(keyed), prepare(keyed.orderBy("amount"))
    assert batch.metadata["partitioning"] == "kafka-aligned"
    assert batch.partition_rows == again.partition_rows
    nulls = ROWS // 10  # keyless records go wherever librdkafka puts them
    for i, committable in enumerate(batch.committables):
        others = [p for p in committable.partitions if p.partition % 4 != i]
        assert sum(p.record_count for p in others) <= nulls, (i, committable.partitions)
        assert sum(p.record_count for p in committable.partitions if p.partition % 4 == i) > 0
    assert set(commit_all(protocol, batch)) == {Outcome.COMMITTED}
    aborted = TransactionController(protocol).abort_all(again.committables)
    assert {r.outcome for r in aborted} == {Outcome.ABORTED}
    _, seen = assert_exactly_once(
        protocol,
        bootstrap,
        topic,
        *batch.committables,
        *again.committables,
        committed=ROWS,
        aborted=ROWS,
        keys_unique=False,  # the null keys
    )
    assert seen.keys[None] == nulls
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_id(),
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(8)])
    placed, deadline = 0, time.monotonic() + 60
    while placed < ROWS - nulls and time.monotonic() < deadline:
        for message in consumer.consume(1000, 0.5):
            if not message.error() and message.key() is not None:
                assert message.partition() == partition_for_key(message.key(), 8)
                placed += 1
    consumer.close()
    assert placed == ROWS - nulls


def test_alignment_falls_back_to_hash_and_says_why(spark, settings, protocol, make_topic):
    """A topic whose partitions are not a multiple of the Spark partitions, or no key."""
    topic = make_topic(6)
    batches = [
        prepare_dataframe(
            source(spark, 2000),
            topic=topic,
            transactional_ids=ids(4),
            producer_config=settings,
            key_column=key,
            align_with_kafka=True,
        )
        for key in ("id", None)
    ]
    assert [b.partitioning for b in batches] == ["hash", "hash"]
    reasons = [b.metadata["partitioning_reason"] for b in batches]
    assert "not a multiple" in reasons[0] and "no key column" in reasons[1], reasons
    aborted = TransactionController(protocol).abort_all(
        [c for b in batches for c in b.committables]
    )
    assert {r.outcome for r in aborted} == {Outcome.ABORTED}


@WRITERS
def test_value_and_header_columns(spark, settings, bootstrap, protocol, make_topic, writer):
    topic = make_topic(1)
    df = spark.createDataFrame(
        [(1, "payload-1", "tenant-a"), (2, "payload-2", None)], "id INT, body STRING, tenant STRING"
    )
    batch = prepare_dataframe(
        df,
        topic=topic,
        transactional_ids=ids(1),
        producer_config=settings,
        key_column="id",
        value_column="body",
        header_columns=["tenant"],
        writer=writer,
    )
    with_json = prepare_dataframe(
        df.select("id", "tenant"),
        topic=topic,
        transactional_ids=ids(1),
        producer_config=settings,
        key_column="id",
        writer=writer,
    )
    for prepared in (batch, with_json):
        assert set(commit_all(protocol, prepared)) == {Outcome.COMMITTED}
    # Each key twice on purpose: two batches of the same two rows.
    assert_exactly_once(
        protocol,
        bootstrap,
        topic,
        *batch.committables,
        *with_json.committables,
        committed=4,
        aborted=0,
        keys_unique=False,
    )
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique_id(), "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    messages = []
    deadline = time.monotonic() + 30
    while len(messages) < 4 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            messages.append(message)
    consumer.close()
    seen = {(m.key(), m.value(), tuple(m.headers() or ())) for m in messages}
    assert seen == {
        (b"1", b"payload-1", (("tenant", b"tenant-a"),)),
        (b"2", b"payload-2", ()),
        (b"1", b'{"id":1,"tenant":"tenant-a"}', ()),
        (b"2", b'{"id":2}', ()),
    }


@WRITERS
def test_task_killed_mid_write_is_retried_and_still_exactly_once(
    spark, settings, bootstrap, protocol, make_topic, writer
):
    topic = make_topic(3)

    def kill_first_attempt(partition: int, attempt: int, rows: int) -> None:
        if partition == 1 and attempt == 0 and rows >= 2000:
            time.sleep(1)  # let librdkafka deliver what it holds: the log then has it open
            os._exit(1)  # the Python worker dies mid-transaction

    # The JVM writer's executor "dies" alike: its records flushed, its transaction left open.
    fault = jvm_fault(spark, "1,2000,1,die") if writer == "jvm" else nullcontext()
    with fault:
        batch = prepare_dataframe(
            source(spark),
            topic=topic,
            transactional_ids=ids(4),
            producer_config=settings,
            key_column="id",
            on_batch=kill_first_attempt if writer == "python" else None,
            writer=writer,
        )
    assert batch.metadata["attempts"]["1"] >= 1
    assert set(commit_all(protocol, batch)) == {Outcome.COMMITTED}
    report = assert_rows_once(protocol, bootstrap, topic, batch, ROWS)
    assert report.totals["aborted"] >= 1000  # the killed attempt's records, fenced by the retry


@WRITERS
def test_failed_job_then_abort_of_every_leased_id(
    spark, settings, bootstrap, protocol, make_topic, writer
):
    topic = make_topic(3)
    leased = ids(4)

    def partition_3_always_fails(partition: int, attempt: int, rows: int) -> None:
        if partition == 3:
            raise RuntimeError("injected: partition 3 cannot be written")

    fault = jvm_fault(spark, "3,1000,-1,fail") if writer == "jvm" else nullcontext()
    with fault, pytest.raises(PrepareError, match="abort \\(fence\\) this run's ids"):
        prepare_dataframe(
            source(spark),
            topic=topic,
            transactional_ids=leased,
            producer_config=settings,
            key_column="id",
            on_batch=partition_3_always_fails if writer == "python" else None,
            writer=writer,
        )
    assert audit(protocol, topic).totals["open"] > 0  # some partitions had prepared
    controller = TransactionController(protocol)
    for tid in leased:
        controller.fence(tid)
    report, _ = assert_exactly_once(protocol, bootstrap, topic, committed=0)
    assert report.totals["aborted"] > 0, report.to_dict()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"key_column": "nope"}, "key column 'nope' is not in the DataFrame"),
        ({"key_column": "tags"}, "key column 'tags' has unsupported type map"),
        ({"key_column": "id", "value_column": "id"}, "value column 'id' has unsupported type"),
        ({"key_column": "id", "header_columns": ["amount"]}, "header column 'amount'"),
        ({"key_column": "maybe"}, "key column 'maybe' is null in some rows"),
        ({"key_column": "id", "transactional_ids": []}, "at least one id"),
        ({"key_column": "id", "transactional_ids": ["a", "a"]}, "distinct"),
        ({"key_column": "id", "transactional_ids": ["bad id"]}, "transactional_ids"),
    ],
)
@WRITERS
def test_bad_input_is_named_and_leaves_nothing_open(
    spark, settings, bootstrap, protocol, topic, kwargs, message, writer
):
    df = spark.createDataFrame(
        [(1, {"a": "b"}, 2.5, "x"), (2, {}, 1.0, None)],
        "id INT, tags MAP<STRING,STRING>, amount DOUBLE, maybe STRING",
    )
    arguments = {
        "topic": topic,
        "transactional_ids": ids(2),
        "producer_config": settings,
        "writer": writer,
        **kwargs,
    }
    with pytest.raises(ConfigurationError, match=message):
        prepare_dataframe(df, **arguments)
    assert_nothing_written(protocol, bootstrap, topic)


def assert_nothing_written(protocol, bootstrap, topic: str) -> None:
    report, _ = assert_exactly_once(protocol, bootstrap, topic, committed=0, aborted=0)
    assert {p.end_offset for p in report.partitions.values()} == {0}, report.to_dict()


@WRITERS
@pytest.mark.parametrize("align", [True, False], ids=["aligned", "by-hash"])
@pytest.mark.parametrize("ahead", [False, True], ids=["checked-here", "checked-ahead"])
def test_missing_topic_is_refused_before_any_transaction(spark, settings, ahead, align, writer):
    """Also when the application started the check while its session started: the
    refusal surfaces at the same point."""
    checking = None
    if ahead:
        with ThreadPoolExecutor(1) as pool:
            checking = pool.submit(check_topic, settings, "no-such-topic")
    with pytest.raises(ConfigurationError, match="create it first"):
        prepare_dataframe(
            source(spark, 10),
            topic="no-such-topic",
            transactional_ids=ids(2),
            producer_config=settings,
            key_column="id",
            writer=writer,
            align_with_kafka=align,
            topic_partitions=checking,
        )


@WRITERS
def test_empty_source_prepares_nothing_and_says_so(
    spark, settings, bootstrap, protocol, topic, writer
):
    batch = prepare_dataframe(
        source(spark).where("id < 0"),
        topic=topic,
        transactional_ids=ids(2),
        producer_config=settings,
        key_column="id",
        writer=writer,
    )
    assert batch.is_empty and batch.committables == ()
    assert batch.metadata["message"] == "source is empty; nothing prepared"
    assert_nothing_written(protocol, bootstrap, topic)


def last_json(stdout: str) -> dict:
    return json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])


def write_parquet(path: Path, rows: int) -> Path:
    table = pa.table(
        {
            "id": list(range(rows)),
            "name": [f"n{i}" for i in range(rows)],
            "day": ["2026-11-21" if i % 4 else "2026-11-22" for i in range(rows)],
        }
    )
    pq.write_table(table, path)
    return path


def submit_prepare(
    master: str, bootstrap: str, topic: str, tmp_path: Path, leased: list[str], *extra: str
) -> tuple[int, Path, str]:
    source_path = write_parquet(tmp_path / "source.parquet", ROWS)
    manifest = tmp_path / "manifest.json"
    done = spark_submit_prepare(
        [
            "--source-path",
            str(source_path),
            "--source-format",
            "parquet",
            "--topic",
            topic,
            "--transactional-ids",
            ",".join(leased),
            "--key-column",
            "id",
            "--bootstrap-servers",
            bootstrap,
            "--manifest",
            str(manifest),
            *extra,
        ],
        master=master,
        log_path=tmp_path / "spark-submit.log",
    )
    return done.returncode, manifest, done.stdout


@WRITERS
def test_spark_submit_local_then_commit_from_another_process(
    bootstrap, protocol, make_topic, tmp_path, writer
):
    topic = make_topic(4)
    # --shuffle: aligned, as asked (a parquet source is read by its splits by default).
    code, manifest, stdout = submit_prepare(
        "local[2]", bootstrap, topic, tmp_path, ids(4), "--writer", writer, "--shuffle"
    )
    log = (tmp_path / "spark-submit.log").read_text()
    assert code == 0, log[-3000:]
    assert last_json(stdout)["source_rows"] == ROWS
    batch = Manifest.from_json(manifest.read_text())
    assert batch.metadata["writer"] == writer
    # The jar came with the session (spark.jars): the key hash registered at the first try,
    # with no ADD JAR between the session's start and the first job.
    assert batch.metadata["partitioning"] == ALIGNED
    assert "is not on the classpath" not in log
    # The application and its Python workers are gone; the transactions are not.
    assert audit(protocol, topic, *batch.committables).totals["open"] == ROWS

    done = cli("commit", "-b", bootstrap, str(manifest))
    assert done.returncode == 0, done.stdout + done.stderr
    outcomes = {r["outcome"] for r in json.loads(done.stdout)["results"]}
    assert outcomes == {"COMMITTED"}
    assert_rows_once(protocol, bootstrap, topic, batch, ROWS, aborted=0)


def test_the_driver_maps_the_class_archive_an_earlier_run_wrote(
    bootstrap, protocol, make_topic, tmp_path, monkeypatch
):
    """spark/class_sharing.py with a real spark-submit: the first run leaves a trace, the
    second's driver JVM writes the archive as it exits, the third maps it (the JVM's
    class-load log says where each class came from), and every run prepares every row
    exactly once. Each driver also compiles with spark/compilation.py's thresholds, which
    the user's own options (here: print the final flags) follow."""
    monkeypatch.setenv("KAFKA2PC_CACHE_DIR", str(tmp_path / "cache"))
    source_path = write_parquet(tmp_path / "source.parquet", ROWS)
    archives = tmp_path / "cache" / "class-sharing"
    loaded_from: list[str] = []
    for run, archived in (("first", 0), ("second", 1), ("third", 1)):
        topic, manifest = make_topic(2), tmp_path / f"{run}.json"
        classes = tmp_path / f"{run}-classes.log"
        done = spark_submit_prepare(
            [
                *("--source-path", str(source_path), "--topic", topic, "--key-column", "id"),
                *("--transactional-ids", ",".join(ids(2)), "--bootstrap-servers", bootstrap),
                *("--manifest", str(manifest), "--writer", "jvm"),
            ],
            # The user's own options still apply after the archive's and the compiler's.
            conf={
                "spark.driver.extraJavaOptions": (
                    f"-Xlog:class+load=info:file={classes} -XX:+PrintFlagsFinal"
                )
            },
            log_path=tmp_path / f"{run}.log",
        )
        assert done.returncode == 0, (tmp_path / f"{run}.log").read_text()[-3000:]
        assert last_json(done.stdout)["source_rows"] == ROWS
        for threshold in THRESHOLDS:  # "-XX:Name=value", as the JVM took it
            name, value = threshold.removeprefix("-XX:").split("=")
            assert re.search(rf"\b{name} += {value} .*command line", done.stdout), threshold
        assert len(list(archives.glob("spark-driver-*.jsa"))) == archived
        assert not list(archives.glob(".*.tmp"))
        loaded_from.append(classes.read_text())
        batch = Manifest.from_json(manifest.read_text())
        committed = cli("commit", "-b", bootstrap, str(manifest))
        assert committed.returncode == 0, committed.stdout + committed.stderr
        assert_rows_once(protocol, bootstrap, topic, batch, ROWS, aborted=0)
    mapped = [text.count("source: shared objects file (top)") for text in loaded_from]
    assert mapped[:2] == [0, 0]
    # Spark's driver classes (Spark's own and Scala's among them) come mapped.
    assert mapped[2] > 5_000, mapped
    assert "org.apache.spark.SparkContext source: shared objects file (top)" in loaded_from[2]


def prepare_and_commit(bootstrap, protocol, make_topic, tmp_path: Path, run: str, rows: int):
    """One spark-submit of the prepare of ``rows`` rows (the driver logging its class loads)
    and the commit, checked exactly once: (the spark-submit's stderr, the class-load log)."""
    source_path = tmp_path / "source.parquet"
    if not source_path.exists():
        write_parquet(source_path, rows)
    topic, manifest = make_topic(2), tmp_path / f"{run}.json"
    classes, log = tmp_path / f"{run}-classes.log", tmp_path / f"{run}.log"
    done = spark_submit_prepare(
        [
            *("--source-path", str(source_path), "--topic", topic, "--key-column", "id"),
            *("--transactional-ids", ",".join(ids(2)), "--bootstrap-servers", bootstrap),
            *("--manifest", str(manifest), "--writer", "jvm"),
        ],
        conf={"spark.driver.extraJavaOptions": f"-Xlog:class+load=info:file={classes}"},
        log_path=log,
    )
    stderr = log.read_text()
    assert done.returncode == 0, stderr[-3000:]
    assert "A fatal error has been detected" not in done.stdout + stderr
    assert last_json(done.stdout)["source_rows"] == rows
    batch = Manifest.from_json(manifest.read_text())
    committed = cli("commit", "-b", bootstrap, str(manifest))
    assert committed.returncode == 0, committed.stdout + committed.stderr
    assert_rows_once(protocol, bootstrap, topic, batch, rows, aborted=0)
    return stderr, classes.read_text()


def foreign_archive(path: Path) -> None:
    """A dynamic archive another class path wrote: a JVM that ran Spark's launcher jar alone
    (half a second, where the driver's own costs a run 16 s). It runs the launcher's main
    class (which exits on its missing arguments): an archive of JDK classes only records no
    class path, and any driver maps it."""
    (launcher,) = class_sharing.spark_jars(spark_submit_binary()).glob("spark-launcher_*.jar")
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            *(java_binary(), f"-XX:ArchiveClassesAtExit={path}", "-Xlog:disable"),
            *("-cp", str(launcher), "org.apache.spark.launcher.Main"),
        ],
        capture_output=True,
    )
    assert path.stat().st_size > 0


@pytest.mark.parametrize("bad", ["other class path", "other runtime build", "truncated"])
def test_a_bad_driver_archive_never_fails_the_prepare_and_is_evicted(
    bootstrap, protocol, make_topic, tmp_path, monkeypatch, bad
):
    """spark/class_sharing.py fails safe with a real spark-submit: an archive of another
    class path or another build of the JVM (which JDK 17 refuses, the latter without a
    word), or one shorter than published (on which JDK 17 dies of SIGBUS: it is never
    handed over), leaves the prepare exact, and is gone for the next run to write afresh."""
    monkeypatch.setenv("KAFKA2PC_CACHE_DIR", str(tmp_path / "cache"))
    final = class_sharing.archive_for({}, spark_submit_binary())
    assert final is not None
    foreign_archive(final)
    if bad == "other runtime build":
        data = final.read_bytes()
        ident = data.find(b"OpenJDK 64-Bit Server VM (") + len("OpenJDK 64-Bit Server VM (")
        assert ident > 100, "no JVM ident in the archive's header"
        final.write_bytes(data[:ident] + b"0" + data[ident + 1 :])  # "17.0..." to "07.0..."
    class_sharing.record_size(final, final.stat().st_size)
    if bad == "truncated":
        final.write_bytes(final.read_bytes()[: final.stat().st_size // 2])
    assert class_sharing.runs_until_mapped({}, spark_submit_binary()) == (
        2 if bad == "truncated" else 0
    )

    _, classes = prepare_and_commit(bootstrap, protocol, make_topic, tmp_path, "bad", 200)

    assert "source: shared objects file (top)" not in classes
    assert "java.lang.Object source: shared objects file" in classes  # the JDK's own
    assert not final.exists()
    assert class_sharing.runs_until_mapped({}, spark_submit_binary()) == 1


def test_a_damaged_driver_archive_is_refused_by_its_checksums_and_evicted(
    bootstrap, protocol, make_topic, tmp_path, monkeypatch
):
    """An archive of the driver's class path, damaged inside (the size it was published
    with): JDK 17 maps damaged classes, or crashes on them; with -XX:+VerifySharedSpaces it
    refuses it, the prepare stays exact, and the archive is evicted."""
    monkeypatch.setenv("KAFKA2PC_CACHE_DIR", str(tmp_path / "cache"))
    binary = spark_submit_binary()
    with driver_archive({}, binary):
        pass  # the first run's trace: the next one writes
    # Written by a driver JVM that only prints Spark's version (9 s, where a prepare that
    # writes takes a minute here): the same class path, fewer classes.
    with driver_archive({}, binary) as archive:
        options = archive.conf[class_sharing.DRIVER_OPTIONS]
        assert "-XX:ArchiveClassesAtExit=" in options
        subprocess.run(
            [binary, "--conf", f"{class_sharing.DRIVER_OPTIONS}={options}", "--version"],
            check=True,
            capture_output=True,
        )
        archive.publish()
    final = class_sharing.archive_for({}, binary)
    assert final is not None and final.is_file()
    # Undamaged, a driver maps it (so what refuses it below is the damage), and that run
    # counts as its use.
    weeks_ago = time.time() - class_sharing.UNUSED_FOR_S
    os.utime(final, (weeks_ago, weeks_ago))
    with driver_archive({}, binary) as archive:
        options = archive.conf[class_sharing.DRIVER_OPTIONS]
        assert "-XX:SharedArchiveFile=" in options
        subprocess.run(
            [binary, "--conf", f"{class_sharing.DRIVER_OPTIONS}={options}", "--version"],
            check=True,
            capture_output=True,
        )
        archive.publish()
    assert final.stat().st_mtime > weeks_ago + 3600
    size = final.stat().st_size
    with final.open("r+b") as damaged:  # 64 KiB flipped in the middle, the size kept
        damaged.seek(size // 2)
        flipped = bytes(b ^ 0xFF for b in damaged.read(65536))
        damaged.seek(size // 2)
        damaged.write(flipped)
    assert final.stat().st_size == size

    stderr, classes = prepare_and_commit(bootstrap, protocol, make_topic, tmp_path, "map", 200)

    assert "Unable to use shared archive" in stderr
    assert "source: shared objects file (top)" not in classes
    assert not final.exists()
    assert class_sharing.runs_until_mapped({}, binary) == 1


def test_spark_submit_refuses_speculation(bootstrap, protocol, topic, tmp_path):
    source_path = write_parquet(tmp_path / "source.parquet", 100)
    manifest = tmp_path / "manifest.json"
    done = spark_submit_prepare(
        [
            "--source-path",
            str(source_path),
            "--topic",
            topic,
            "--transactional-ids",
            "a,b",
            "--bootstrap-servers",
            bootstrap,
            "--manifest",
            str(manifest),
        ],
        master="local[2]",
        log_path=tmp_path / "submit.log",
        conf={"spark.speculation": "true"},
    )
    assert done.returncode == 2
    assert "spark.speculation" in last_json(done.stdout)["message"]
    assert not manifest.exists()
    assert_nothing_written(protocol, bootstrap, topic)


def test_standalone_cluster_with_two_workers(bootstrap, protocol, make_topic, tmp_path):
    """Aligned with Kafka (asked: ``--shuffle``) there too: the executors, other JVMs, load
    the Java UDF from the jar the driver added, and the JVM writer's kafka-clients. (The
    Python writer on a standalone cluster's executors: the cluster deploy mode test,
    tests/airflow/test_export_cluster_mode.py.)"""
    topic = make_topic(6)
    with standalone_cluster(workers=2, log_dir=tmp_path) as master:
        code, manifest, _ = submit_prepare(
            master,
            bootstrap,
            topic,
            tmp_path,
            ids(6),
            "--filter",
            "day = '2026-11-21'",
            "--writer",
            "jvm",
            "--shuffle",
        )
    assert code == 0, (tmp_path / "spark-submit.log").read_text()[-3000:]
    batch = Manifest.from_json(manifest.read_text())
    assert batch.metadata["partitioning"] == "kafka-aligned"
    assert [len(c.partitions) for c in batch.committables] == [1] * 6
    expected = sum(1 for i in range(ROWS) if i % 4)
    assert batch.source_rows == expected
    assert set(commit_all(protocol, batch)) == {Outcome.COMMITTED}
    assert_rows_once(protocol, bootstrap, topic, batch, expected, aborted=0)


@pytest.mark.kafka_versions()
def test_jvm_writer_transactions_stay_open_then_commit_and_abort_on_each_kafka_version(
    spark, kafka_version, settings, bootstrap, protocol, make_topic
):
    """Kafka's Java producer, closed with Duration.ZERO, leaves each transaction open under
    the producer id and epoch the committable took from DescribeTransactions; our controller
    then ends them with the transaction version the client used: TV2 (KIP-890, EndTxn v5,
    the epoch bumped at the end) on 4.4.0, the classic protocol on 3.9.2."""
    topic = make_topic(4)
    kept = prepare_dataframe(
        source(spark),
        topic=topic,
        transactional_ids=ids(4),
        producer_config=settings,
        key_column="id",
        writer="jvm",
    )
    dropped = prepare_dataframe(
        source(spark, 5000),
        topic=topic,
        transactional_ids=ids(2),
        producer_config=settings,
        key_column="id",
        writer="jvm",
    )
    everything = [*kept.committables, *dropped.committables]
    version = 2 if kafka_version == DEFAULT_KAFKA_VERSION else 1
    assert {c.transaction_version for c in everything} == {version}
    assert audit(protocol, topic, *everything).totals["open"] == ROWS + 5000
    described = protocol.describe_transactions([c.transactional_id for c in everything])
    assert [(d.state, d.producer_id, d.producer_epoch) for d in described] == [
        (CoordinatorTxnState.ONGOING, c.producer_id, c.producer_epoch) for c in everything
    ]

    controller = TransactionController(protocol)
    assert {r.outcome for r in controller.commit_all(kept.committables)} == {Outcome.COMMITTED}
    assert {r.outcome for r in controller.abort_all(dropped.committables)} == {Outcome.ABORTED}
    after = protocol.describe_transactions([c.transactional_id for c in everything])
    bump = 1 if version == 2 else 0
    assert [d.producer_epoch for d in after] == [c.producer_epoch + bump for c in everything]
    assert_rows_once(protocol, bootstrap, topic, kept, ROWS, aborted=5000)


def test_jvm_writer_repairs_a_lost_partition_exactly_once(
    spark, settings, bootstrap, protocol, make_topic
):
    """Loss repair with the JVM writer: a partition whose transaction the broker aborted is
    written again from the same input under its own id; the batch then commits once."""
    topic = make_topic(4)
    first = prepare_dataframe(
        source(spark),
        topic=topic,
        transactional_ids=ids(4),
        producer_config=settings,
        key_column="id",
        writer="jvm",
    )
    controller = TransactionController(protocol)
    lost = first.committables[2]
    assert [r.outcome for r in controller.abort_all([lost])] == [Outcome.ABORTED]

    repaired = prepare_dataframe(
        source(spark).orderBy("amount"),
        topic=topic,
        transactional_ids=[c.transactional_id for c in first.committables],
        producer_config=settings,
        key_column="id",
        writer="jvm",
        repair=Repair([2], first.partition_rows, first.partitioning),
    )
    assert repaired.metadata["partitions"] == [2]
    assert [c.record_count for c in repaired.committables] == [lost.record_count]
    final = [*first.committables[:2], *repaired.committables, first.committables[3]]
    assert {r.outcome for r in controller.commit_all(final)} == {Outcome.COMMITTED}
    _, seen = assert_exactly_once(
        protocol, bootstrap, topic, *final, committed=ROWS, aborted=lost.record_count
    )
    assert len(seen.keys) == ROWS


def test_jvm_writer_keeps_the_settings_out_of_the_plan(spark, make_topic, settings):
    """The producer settings (credentials) travel inside the task's function object only:
    the plan Spark prints (explain, its UI's SQL tab) names the function, not its fields."""
    secret = "pa55-" + unique_id()
    jvm = spark.sparkContext._jvm
    ensure_on_classpath(spark)
    java = {**settings, "sasl.jaas.config": f'x required password="{secret}";'}
    jdf = jvm.kafka2pc.spark.JvmWriter.prepare(
        spark.range(3)
        .selectExpr(
            "CAST(CAST(id AS STRING) AS BINARY) AS __kafka2pc_key",
            "CAST(CAST(id AS STRING) AS BINARY) AS __kafka2pc_value",
        )
        ._jdf,
        [make_topic(1)],
        ["t-0"],
        java,
        60000,
        [],
        None,
    )
    plan = jdf.queryExecution().toString()  # analysed, optimised and physical plans: lazy
    lineage = jdf.rdd().toDebugString()  # the tasks' RDDs, the writer's function among them
    assert "ExistingRDD" in plan and "MapPartitionsRDD" in lineage
    for text in (plan, lineage):
        assert secret not in text and "bootstrap" not in text and "jaas" not in text


def test_jvm_writer_passes_tombstones_and_record_timestamps(
    spark, settings, bootstrap, protocol, make_topic
):
    """A null value is written as a tombstone, and ``__kafka2pc_timestamp`` (epoch ms, where
    the encoded frame has it) becomes the record's CreateTime; without it the producer's
    clock sets it. The committable JSON is what Committable.to_json() writes."""
    topic = make_topic(1)
    stamp = 1_700_000_000_000
    encoded = spark.createDataFrame(
        [(b"k1", b"v1", stamp), (b"k2", None, stamp + 1), (b"k3", b"v3", None)],
        "__kafka2pc_key BINARY, __kafka2pc_value BINARY, __kafka2pc_timestamp LONG",
    ).coalesce(1)
    ensure_on_classpath(spark)
    tid = ids(1)[0]
    [row] = jvm_write(
        encoded,
        topics=[topic],
        transactional_ids=[tid],
        settings=producer_settings(settings, 60_000),
        transaction_timeout_ms=60_000,
        header_names=[],
        selected=None,
    )
    committable = Committable.from_json(row["committable"])
    assert row["committable"] == committable.to_json()
    assert (row["input_rows"], committable.record_count) == (3, 3)
    assert TransactionController(protocol).commit(committable).outcome is Outcome.COMMITTED
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_id(),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    messages = []
    deadline = time.monotonic() + 30
    while len(messages) < 3 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            messages.append(message)
    consumer.close()
    seen = {m.key(): (m.value(), m.timestamp()) for m in messages}
    assert seen[b"k1"] == (b"v1", (TIMESTAMP_CREATE_TIME, stamp))
    assert seen[b"k2"] == (None, (TIMESTAMP_CREATE_TIME, stamp + 1))
    assert seen[b"k3"][0] == b"v3" and seen[b"k3"][1][1] > stamp


def test_jvm_writer_refuses_what_it_cannot_do_before_anything_opens(
    spark, settings, bootstrap, protocol, topic
):
    """An unknown writer, a Python ``on_batch`` hook or a setting without a Java equivalent
    is named before any Spark job runs or any transaction opens."""
    refusals = [
        ({"writer": "scala"}, "writer must be one of"),
        ({"writer": "jvm", "on_batch": print}, "on_batch runs in Python workers"),
        (
            {"writer": "jvm", "producer_config": {**settings, "queue.buffering.max.kbytes": 1}},
            "no equivalent the JVM writer knows",
        ),
    ]
    for kwargs, message in refusals:
        arguments = {"producer_config": settings, **kwargs}
        with pytest.raises(ConfigurationError, match=message):
            prepare_dataframe(source(spark, 10), topic=topic, transactional_ids=ids(2), **arguments)
    assert_nothing_written(protocol, bootstrap, topic)


def test_a_failed_jvm_task_names_its_cause_on_the_driver(spark, bootstrap, topic):
    """A task's failure reaches the driver with the Kafka client's own words: rethrown as
    a JDK exception, since the driver cannot deserialise kafka-clients' (added with ADD JAR)
    and would say only "UnknownReason"."""
    encoded = spark.createDataFrame(
        [(b"k", b"v")], "__kafka2pc_key BINARY, __kafka2pc_value BINARY"
    ).coalesce(1)
    ensure_on_classpath(spark)
    unusable = {  # past the driver's checks, refused by the client on the executor
        "bootstrap.servers": bootstrap,
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/nonexistent/ca.pem",
    }
    with pytest.raises(Exception, match="cannot create its producer") as failed:
        jvm_write(
            encoded,
            topics=[topic],
            transactional_ids=ids(1),
            settings=unusable,
            transaction_timeout_ms=60_000,
            header_names=[],
            selected=None,
        )
    assert "UnknownReason" not in str(failed.value)
    assert "org.apache.kafka.common" in str(failed.value)
