"""Source-split partitioning: no shuffle, yet a loss repair rewrites exactly the lost rows.

Real Spark (an in-process local session), the real broker, parquet files on disk; every
end state checked by both witnesses (the log's markers and a read_committed consumer).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from airflow_provider_kafka2pc.errors import ConfigurationError, PrepareError, SourceChangedError
from airflow_provider_kafka2pc.spark import prepare_dataframe, source_splits
from airflow_provider_kafka2pc.spark.prepare import Repair
from airflow_provider_kafka2pc.spark.source_splits import SPLIT_SETTINGS, SourceSplits
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from airflow_provider_kafka2pc.transaction.manifest import ALIGNED, HASH, SOURCE, Manifest
from tests.conftest import assert_exactly_once, unique_id
from tests.support.spark import local_session

FILES = 4
ROWS_PER_FILE = 2_500
ROWS = FILES * ROWS_PER_FILE
OPEN_COST = "spark.sql.files.openCostInBytes"


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    yield from local_session()


@pytest.fixture(autouse=True)
def fresh_split_settings(spark):
    """Each test starts from Spark's defaults (the prepare pins them on the session)."""
    for key in SPLIT_SETTINGS:
        spark.conf.unset(key)


def ids(count: int) -> list[str]:
    run = unique_id("splits")
    return [f"{run}-{i}" for i in range(count)]


def write_files(directory: Path, files: int = FILES, salt: str = "") -> Path:
    directory.mkdir(exist_ok=True)
    for f in range(files):
        first = f * ROWS_PER_FILE
        numbers = range(first, first + ROWS_PER_FILE)
        table = pa.table(
            {
                "id": list(numbers),
                "name": [f"n{salt}{i}" for i in numbers],
                "file": [f] * len(numbers),
            }
        )
        pq.write_table(table, directory / f"part-{f}.parquet")
    return directory


def prepare(spark, directory: Path, topic: str, leased: list[str], settings, **kw) -> Manifest:
    return prepare_dataframe(
        spark.read.parquet(str(directory)),
        topic=topic,
        transactional_ids=leased,
        producer_config=settings,
        key_column="id",
        partitioning=SOURCE,
        **kw,
    )


def commit(protocol, committables) -> set[Outcome]:
    return {r.outcome for r in TransactionController(protocol).commit_all(committables)}


@pytest.mark.parametrize("writer", ["python", "jvm"])
def test_an_export_by_source_splits_is_exactly_once(
    spark, settings, bootstrap, protocol, make_topic, tmp_path, writer
):
    """Four files, three ids: the splits coalesced, no shuffle; eight ids: four empty."""
    source = write_files(tmp_path / "orders")
    topic = make_topic(3)
    spark.conf.set(OPEN_COST, "0")  # one split per file (the default packs 2 small ones)
    batch = prepare(spark, source, topic, ids(3), settings, writer=writer)
    splits = SourceSplits.from_dict(batch.metadata["source_splits"])
    assert batch.partitioning == SOURCE and "partitioning_reason" not in batch.metadata
    assert (splits.splits, splits.partitions) == (FILES, 3), splits
    assert splits.settings[OPEN_COST] == "0"
    assert splits.settings["spark.sql.files.minPartitionNum"] == "3"
    assert spark.conf.get("spark.sql.files.minPartitionNum", None) is None  # restored
    assert sum(batch.partition_rows) == ROWS and all(batch.partition_rows)
    spark.conf.unset(OPEN_COST)  # 4 MB per file opened: still one split per file
    other = make_topic(3)
    wide = prepare(spark, source, other, ids(8), settings, writer=writer)
    assert wide.metadata["source_splits"]["splits"] == FILES
    assert [c.is_empty for c in wide.committables] == [False] * FILES + [True] * (8 - FILES)
    assert list(wide.partition_rows) == [ROWS_PER_FILE] * FILES + [0] * (8 - FILES)
    assert commit(protocol, batch.committables) == {Outcome.COMMITTED}
    assert commit(protocol, wide.committables) == {Outcome.COMMITTED}  # the empty ones too
    for name, prepared in ((topic, batch), (other, wide)):
        report, seen = assert_exactly_once(
            protocol, bootstrap, name, *prepared.committables, committed=ROWS
        )
        assert report.duplicates["committed_keys"] == ROWS and len(seen.keys) == ROWS


@pytest.mark.parametrize("writer", ["python", "jvm"])
def test_a_loss_repair_under_other_settings_rewrites_exactly_the_lost_rows(
    spark, settings, bootstrap, protocol, make_topic, tmp_path, writer
):
    source = write_files(tmp_path / "orders")
    topic = make_topic(3)
    leased = ids(3)
    spark.conf.set(OPEN_COST, "0")
    batch = prepare(spark, source, topic, leased, settings, writer=writer)
    controller = TransactionController(protocol)
    lost = batch.committables[1]
    assert controller.abort(lost).outcome is Outcome.ABORTED  # as the broker's timeout would
    assert commit(protocol, [batch.committables[0], batch.committables[2]]) == {Outcome.COMMITTED}
    # Another session's settings: without the recorded ones, one split of all four files.
    spark.conf.set(OPEN_COST, str(4 << 20))
    spark.conf.set("spark.sql.files.minPartitionNum", "1")
    assert spark.read.parquet(str(source)).rdd.getNumPartitions() == 1
    repaired = prepare(
        spark,
        source,
        topic,
        leased,
        settings,
        repair=Repair([1], batch.partition_rows, SOURCE, batch.metadata["source_splits"]),
    )
    assert repaired.partition_rows == batch.partition_rows
    (again,) = repaired.committables
    assert again.transactional_id == lost.transactional_id
    assert again.record_count == lost.record_count
    assert commit(protocol, [again]) == {Outcome.COMMITTED}
    report, seen = assert_exactly_once(
        protocol,
        bootstrap,
        topic,
        *batch.committables,
        again,
        committed=ROWS,
        aborted=lost.record_count,
    )
    assert report.duplicates["committed_keys"] == ROWS and len(seen.keys) == ROWS


@pytest.mark.parametrize("change", ["rewritten", "added"])
def test_a_changed_input_is_refused_before_any_transaction_opens(
    spark, settings, bootstrap, protocol, make_topic, tmp_path, change
):
    """Same row counts per partition (a file rewritten): the counts alone would let the
    repair write other rows; the input's fingerprint refuses it. A file added: likewise."""
    source = write_files(tmp_path / "orders")
    topic = make_topic(3)
    leased = ids(3)
    spark.conf.set(OPEN_COST, "0")
    batch = prepare(spark, source, topic, leased, settings)
    controller = TransactionController(protocol)
    assert {r.outcome for r in controller.abort_all(batch.committables)} == {Outcome.ABORTED}
    before = {d.transactional_id: d for d in protocol.describe_transactions(leased)}
    if change == "rewritten":
        write_files(source, salt="x")
    else:
        pq.write_table(
            pa.table({"id": [-1], "name": ["late"], "file": [9]}), source / "late.parquet"
        )
    with pytest.raises(SourceChangedError, match=r"the input files .* differ"):
        prepare(
            spark,
            source,
            topic,
            leased,
            settings,
            repair=Repair([0, 2], batch.partition_rows, SOURCE, batch.metadata["source_splits"]),
        )
    after = {d.transactional_id: d for d in protocol.describe_transactions(leased)}
    assert after == before  # no InitProducerId, no transaction: the epochs did not move
    assert_exactly_once(protocol, bootstrap, topic, *batch.committables, committed=0, aborted=ROWS)


def test_a_source_without_pinnable_splits_is_shuffled_and_says_why(
    spark, settings, bootstrap, protocol, make_topic
):
    topic = make_topic(2)
    batch = prepare_dataframe(
        spark.range(500).selectExpr("id", "id % 7 AS bucket"),
        topic=topic,
        transactional_ids=ids(2),
        producer_config=settings,
        key_column="id",
        partitioning=SOURCE,
        align_with_kafka=False,
    )
    assert batch.partitioning == HASH and "source_splits" not in batch.metadata
    assert "only a file source" in batch.metadata["partitioning_reason"]
    assert commit(protocol, batch.committables) == {Outcome.COMMITTED}
    assert_exactly_once(protocol, bootstrap, topic, *batch.committables, committed=500)


@pytest.mark.parametrize("writer", ["python", "jvm"])
def test_a_null_key_found_while_writing_is_refused_and_leaves_nothing_open(
    spark, settings, bootstrap, protocol, make_topic, tmp_path, writer
):
    """Without a shuffle the writing task finds the null key, after other partitions may
    have opened their transactions: the prepare aborts every id of the run, then refuses."""
    source = write_files(tmp_path / "orders", files=3)
    pq.write_table(
        pa.table({"id": pa.array([None], pa.int64()), "name": ["nameless"], "file": [3]}),
        source / "part-3.parquet",
    )
    topic = make_topic(3)
    spark.conf.set(OPEN_COST, "0")
    with pytest.raises(ConfigurationError, match="key column 'id' is null in some rows"):
        prepare(spark, source, topic, ids(4), settings, writer=writer)
    report, _ = assert_exactly_once(protocol, bootstrap, topic, committed=0)
    assert report.totals["open"] == 0, report.to_dict()


@pytest.mark.parametrize("writer", ["python", "jvm"])
def test_a_split_record_that_cannot_be_made_aborts_what_the_write_opened(
    spark, settings, bootstrap, protocol, make_topic, tmp_path, monkeypatch, writer
):
    """The record is planned while the job writes (off the driver's path between jobs);
    without it the batch could not be repaired, so a record that fails (scripted: a real
    planner does not fail there) aborts every transaction the write opened, then says so."""

    def unplannable(*args: object) -> SourceSplits:
        raise RuntimeError("the planner went away")

    monkeypatch.setattr(source_splits, "describe", unplannable)
    source = write_files(tmp_path / "orders")
    topic = make_topic(3)
    spark.conf.set(OPEN_COST, "0")
    with pytest.raises(PrepareError, match=r"source splits could not be recorded.*went away"):
        prepare(spark, source, topic, ids(3), settings, writer=writer)
    assert spark.conf.get("spark.sql.files.minPartitionNum", None) is None  # restored
    report, _ = assert_exactly_once(protocol, bootstrap, topic, committed=0, aborted=ROWS)
    assert report.totals["open"] == 0, report.to_dict()


def test_the_defaults_read_a_file_source_by_its_splits_with_the_jvm_writer(
    spark, settings, bootstrap, protocol, make_topic, tmp_path
):
    """``auto`` and ``auto``: a file source is read by its splits (no shuffle) and written
    by the JVM writer; a generated source is aligned, the reason recorded; an explicit
    ``kafka-aligned`` still shuffles the file source. Each exactly once."""
    source = write_files(tmp_path / "orders")
    by_default, generated, aligned = make_topic(3), make_topic(3), make_topic(3)
    batches = {
        by_default: prepare_dataframe(
            spark.read.parquet(str(source)),
            topic=by_default,
            transactional_ids=ids(3),
            producer_config=settings,
            key_column="id",
        ),
        generated: prepare_dataframe(
            spark.range(600).selectExpr("id", "id % 7 AS bucket"),
            topic=generated,
            transactional_ids=ids(3),
            producer_config=settings,
            key_column="id",
        ),
        aligned: prepare_dataframe(
            spark.read.parquet(str(source)),
            topic=aligned,
            transactional_ids=ids(3),
            producer_config=settings,
            key_column="id",
            partitioning=ALIGNED,
        ),
    }
    assert {b.metadata["writer"] for b in batches.values()} == {"jvm"}
    assert not any("writer_reason" in b.metadata for b in batches.values())
    assert batches[by_default].partitioning == SOURCE
    assert "partitioning_reason" not in batches[by_default].metadata
    assert batches[generated].partitioning == ALIGNED
    assert "only a file source" in batches[generated].metadata["partitioning_reason"]
    assert batches[aligned].partitioning == ALIGNED
    assert "source_splits" not in batches[aligned].metadata
    for topic, batch in batches.items():
        assert commit(protocol, batch.committables) == {Outcome.COMMITTED}
        assert_exactly_once(
            protocol, bootstrap, topic, *batch.committables, committed=batch.source_rows
        )


def test_auto_takes_the_python_writer_for_an_on_batch_hook_and_says_why(
    spark, settings, bootstrap, protocol, make_topic
):
    topic = make_topic(2)
    batch = prepare_dataframe(
        spark.range(200).selectExpr("id"),
        topic=topic,
        transactional_ids=ids(2),
        producer_config=settings,
        key_column="id",
        on_batch=lambda partition, attempt, rows: None,
    )
    assert batch.metadata["writer"] == "python"
    assert "on_batch" in batch.metadata["writer_reason"]
    assert commit(protocol, batch.committables) == {Outcome.COMMITTED}
    assert_exactly_once(protocol, bootstrap, topic, *batch.committables, committed=200)


def test_prepare_in_job_writes_each_source_split_with_a_value_column(
    spark, settings, bootstrap, protocol, make_topic, tmp_path
):
    """``prepare_in_job`` (the lease task's parameters, the user's own job's DataFrame) with
    the spec's source splits and a value column: four files coalesced into three
    transactions, no shuffle, each record's value the column's bytes as they are."""
    from airflow_provider_kafka2pc.spark.export_spec import ExportSpec
    from airflow_provider_kafka2pc.spark.external import JobParameters, prepare_in_job
    from tests.integration.test_wire_formats import consume_all

    source = write_files(tmp_path / "orders")
    topic = make_topic(2)
    spark.conf.set(OPEN_COST, "0")  # one split per file
    spec = ExportSpec(topic=topic, key_column="id", value_column="name", partitioning=SOURCE)
    manifest = tmp_path / "manifest.json"
    params = JobParameters(spec, tuple(ids(3)), unique_id("job"), str(manifest))

    batch = prepare_in_job(spark.read.parquet(str(source)), params.to_dict(), settings)

    assert batch is not None and manifest.exists()
    assert batch.metadata["writer"] == "jvm"  # auto's choice in a classic session
    splits = SourceSplits.from_dict(batch.metadata["source_splits"])
    assert batch.partitioning == SOURCE and (splits.splits, splits.partitions) == (FILES, 3)
    assert sum(batch.partition_rows) == ROWS and all(batch.partition_rows)
    assert commit(protocol, batch.committables) == {Outcome.COMMITTED}
    assert_exactly_once(protocol, bootstrap, topic, *batch.committables, committed=ROWS)
    values = {int(m.key()): m.value() for m in consume_all(bootstrap, topic, ROWS)}
    assert values == {i: b"n%d" % i for i in range(ROWS)}
