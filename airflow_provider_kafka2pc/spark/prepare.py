"""Driver side of the prepare phase: a DataFrame becomes one prepared transaction per partition.

Order of work, chosen so that a transaction is open only while its records are written
(Kafka aborts it when it outlives ``transaction.timeout.ms``) and the input is read once:

1. validate everything that can be validated without Kafka transactions (columns,
   types, ids, topic, speculation);
2. partition deterministically (a stable hash of the key, or of the whole row; or, with
   ``align_with_kafka``, the owner of the key's Kafka partition: :mod:`.alignment`) so a
   recomputed partition holds the same records, and encode key/value/headers in the JVM.
   A required key that is null fails this shuffle's map stage, which Spark finishes before
   any writing task starts: bad keys are refused before any transaction opens.
   With ``partitioning=SOURCE`` there is no shuffle: the source's own file splits are
   the partitions (:mod:`.source_splits`), and a bad row found while writing aborts
   every id of the run before the refusal;
3. run ``mapInArrow`` over the shuffled rows: each partition writes its transaction and
   reports its committable and the rows it read;
4. check that every partition reported exactly one committable whose count equals the rows
   it read, else fail naming the partitions (the orchestrator aborts the leased ids).

There is no counting pass before the write: the rows a partition read are its count,
and a recomputed partition reads the same rows. Measured on 2M rows, caching the shuffled
input and counting it first cost about a fifth of the prepare (docs/performance.md).

Loss repair re-runs the same prepare with ``repair``: the whole input is partitioned exactly
as before (same ids, same number of partitions), cached, and its per-partition counts are
compared with the recorded ones BEFORE any transaction opens; only the selected partitions
write, from the cache.

Over 500 lines on purpose: the steps above are one function's order of work, and its checks
sit beside the step they guard; the encoding is :mod:`.encoding`, the writers their modules.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, wait
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .. import defaults
from ..connection.acls import authorization_error
from ..connection.tls import check_tls
from ..errors import (
    ConfigurationError,
    Kafka2pcError,
    PrepareError,
    ProtocolError,
    SourceChangedError,
)
from ..naming import validate_transactional_id
from ..protocol.client import KafkaProtocol
from ..transaction.committable import Committable
from ..transaction.manifest import ALIGNED, HASH, PARTITIONINGS, SOURCE, Manifest
from ..transaction.routing import Routing
from .alignment import Alignment, register_key_hash, why_not_aligned
from .connect import is_connect, ship_settings
from .encoding import encode_columns, job_refusal, partitioned_input, resolved_schemas
from .export_spec import ExportSpec
from .job import Repair
from .jvm_writer import (
    AUTO,
    JVM,
    PYTHON,
    check_writer,
    choose_writer,
    connect_files,
    jvm_write,
    producer_settings,
)
from .partition_writer import (
    RESULT_SCHEMA,
    ArrowBatchCallback,
    partition_writer,
)
from .partitionings import AUTO_PARTITIONING, check_partitioning
from .progress import PartitionProgress
from .source_splits import (
    SPLIT_SETTINGS,
    SourceSplits,
    describe_meanwhile,
    pin_settings,
    restoring_settings,
    why_not_splittable,
)
from .source_splits import check_unchanged as check_splits_unchanged
from .source_splits import describe as describe_splits
from .timestamps import check_timestamps
from .wire import (
    WireOptions,
)

log = logging.getLogger(__name__)


def prepare_dataframe(
    df: DataFrame,
    *,
    topic: str | None = None,
    transactional_ids: Sequence[str],
    producer_config: Mapping[str, Any],
    key_column: str | None = None,
    value_column: str | None = None,
    header_columns: Sequence[str] = (),
    transaction_timeout_ms: int = defaults.TRANSACTION_TIMEOUT_MS,
    job_label: str | None = None,
    require_keys: bool | None = None,
    on_batch: ArrowBatchCallback | None = None,
    repair: Repair | None = None,
    progress_interval_s: float | None = None,
    align_with_kafka: bool = True,
    wire: WireOptions | None = None,
    writer: str = AUTO,
    topic_partitions: Future[dict[str, int]] | None = None,
    partitioning: str | None = AUTO_PARTITIONING,
    topic_column: str | None = None,
    topics: Sequence[str] | None = None,
) -> Manifest:
    """Write ``df`` into ``len(transactional_ids)`` open Kafka transactions, one per partition.

    :param df: the rows to export.
    :param topic: an existing Kafka topic, every row's; or None with ``topic_column``.
    :param topic_column: a string column naming each row's topic, one of ``topics`` (every
        one checked before anything opens; a row naming another, or null, is refused
        before any transaction opens, like a null required key). Each transaction spans
        the topics its rows go to, so the export commits or aborts as one.
    :param topics: with ``topic_column``, every topic its values may name.
    :param transactional_ids: one id per Spark partition (leased by the orchestrator);
        their number is the number of partitions.
    :param producer_config: librdkafka settings (``bootstrap.servers``, security, tuning).
    :param key_column: record key (atomic type, rendered as text; binary as is). Rows are
        partitioned by its hash; without it, by the hash of the whole row.
    :param value_column: a string/binary column to send as the value; default: the row as JSON.
    :param header_columns: string/binary columns sent as headers named after the column.
    :param require_keys: refuse null keys (default: whenever ``key_column`` is given).
    :param on_batch: called on the executor after each Arrow batch is queued, with
        (partition, attempt, rows so far): progress reporting, and fault injection in tests.
    :param repair: loss repair (:class:`Repair`): write only its partitions, and only if
        the input still holds the recorded rows.
    :param progress_interval_s: each partition writes its rows written to its
        executor's stderr at most this often, and once when delivered
        (:class:`~.progress.PartitionProgress`); None or 0: no progress lines.
    :param align_with_kafka: partition the rows so that each Spark partition owns the Kafka
        partitions ``p`` with ``p mod N`` = its index (:mod:`.alignment`): fewer, fuller
        record batches, fewer partitions in each transaction, fewer markers. On by default;
        it applies when the export has a key column, the murmur2 partitioner and a topic
        whose partitions are a multiple of N; otherwise the rows are partitioned by hash
        and the manifest's ``partitioning_reason`` says why. A loss repair partitions as
        its prepare did (``repair.partitioning``), not by this setting.
    :param wire: registry Avro values/keys, tombstones, record timestamps
        (:class:`~.wire.WireOptions`, docs/wire-formats.md); the registry is asked once,
        here on the driver, after the columns and the topic are checked and before any
        transaction opens.
    :param writer: who writes the transactions: ``"auto"`` (default: the JVM writer on a
        classic session that loads it, or a Spark Connect server that has our jar and
        kafka-clients on its class path, else the Python one), ``"python"`` (confluent-kafka
        in Spark's Python workers, :mod:`.partition_writer`) or ``"jvm"`` (Kafka's Java
        producer inside the executors, :mod:`.jvm_writer`; no ``on_batch``, no progress
        lines yet). The manifest records the one used (``metadata["writer"]``, and
        ``writer_reason`` when ``auto`` could not use the JVM one). Which rows a
        transaction holds does not depend on it, so a loss repair may use either.
    :param topic_partitions: the topic check (:func:`_check_topics` of ``producer_config``
        and the topics) already under way: the application starts it while its
        SparkSession starts; its answer or error is taken here, where the check would run.
    :param partitioning: ``"auto"`` (default): by source splits where the plan pins
        them, else aligned with Kafka where that applies (and ``align_with_kafka``), else
        by hash. :data:`~..transaction.manifest.SOURCE` writes each of the source's own
        file splits (coalesced to at most one per id) as one transaction, without a
        shuffle (:mod:`.source_splits`; it pins the split settings on the session); a
        source without pinnable splits is partitioned as with None, and the manifest's
        ``partitioning_reason`` says why. :data:`~..transaction.manifest.ALIGNED` or None:
        a shuffle, aligned where that applies (by ``align_with_kafka``), else by hash;
        :data:`~..transaction.manifest.HASH`: a shuffle by hash. The manifest records
        what was used. A loss repair partitions as its prepare did.
    The options are gathered into one :class:`~.export_spec.ExportSpec` and prepared by
    :func:`prepare_export`, which every path calls with the spec it was given.

    :return: the prepared batch; its transactions stay open for the commit phase. With
        ``repair`` it holds the selected partitions' committables in index order
        (``metadata["partitions"]``), their rows as ``source_rows``, and every partition's
        rows in ``partition_rows``.
    """
    wire = wire or WireOptions()
    spec = ExportSpec(
        topic=topic,
        topic_column=topic_column,
        topics=None if topics is None else tuple(topics),
        key_column=key_column,
        value_column=value_column,
        header_columns=tuple(header_columns),
        value_format=wire.value_format,
        key_format=wire.key_format,
        tombstone_when=wire.tombstone_when,
        timestamp_column=wire.timestamp_column,
        transaction_timeout_ms=transaction_timeout_ms,
        progress_interval_s=progress_interval_s or 0,
        align_with_kafka=align_with_kafka,
        partitioning=partitioning,
        writer=writer,
    )
    return prepare_export(
        df,
        spec,
        transactional_ids=transactional_ids,
        producer_config=producer_config,
        registry=wire.registry,
        job_label=job_label,
        require_keys=require_keys,
        on_batch=on_batch,
        repair=repair,
        topic_partitions=topic_partitions,
    )


@restoring_settings
def prepare_export(
    df: DataFrame,
    spec: ExportSpec,
    *,
    transactional_ids: Sequence[str],
    producer_config: Mapping[str, Any],
    registry: Mapping[str, Any] | None = None,
    job_label: str | None = None,
    require_keys: bool | None = None,
    on_batch: ArrowBatchCallback | None = None,
    repair: Repair | None = None,
    topic_partitions: Future[dict[str, int]] | None = None,
) -> Manifest:
    """Write ``df`` into ``len(transactional_ids)`` open Kafka transactions as ``spec`` says,
    one per partition: the prepare of every path (:func:`prepare_dataframe` documents each
    option). The run's own inputs are apart from the spec: the leased ids, the Kafka and
    schema registry settings (``registry``: ``SchemaRegistryClient`` settings, needed with a
    registry format), the job's label, a loss repair, the topic check under way.
    """
    route = spec.route
    key_column, value_column = spec.key_column, spec.value_column
    header_columns = list(spec.header_columns)
    transaction_timeout_ms = spec.transaction_timeout_ms
    progress_interval_s = spec.progress_interval_s
    align_with_kafka, partitioning, writer = spec.align_with_kafka, spec.partitioning, spec.writer
    wire = WireOptions(
        registry=registry,
        value_format=spec.value_format,
        key_format=spec.key_format,
        tombstone_when=spec.tombstone_when,
        timestamp_column=spec.timestamp_column,
    )
    ids = [validate_transactional_id(t, "transactional_ids[]") for t in transactional_ids]
    if not ids:
        raise ConfigurationError("transactional_ids must name at least one id")
    if len(set(ids)) != len(ids):
        raise ConfigurationError("transactional_ids must be distinct")
    writer = check_writer(writer)
    check_partitioning(partitioning, align_with_kafka)
    connect = is_connect(df.sparkSession)
    if connect and partitioning == SOURCE:
        # It reads the plan through py4j, which a Connect client has not.
        raise ConfigurationError(
            "on Spark Connect the prepare runs with a shuffle; "
            f"partitioning={partitioning!r} needs a classic session (spark-submit)"
        )
    # Checked and translated before anything opens: an unmappable setting is named now
    # (under auto, it leaves the prepare to the Python writer).
    java_settings, why_not_jvm = None, None
    if writer == JVM or (writer == AUTO and on_batch is None):
        try:
            java_settings = producer_settings(producer_config, transaction_timeout_ms)
            files = connect_files(producer_config) if connect else []
            if files:
                raise ConfigurationError(
                    f"on Spark Connect the JVM writer cannot ship local files ({files}); "
                    "the Python writer ships them as session artifacts"
                )
        except ConfigurationError as exc:
            if writer == JVM:
                raise
            writer, why_not_jvm = PYTHON, f"the Java producer cannot take these settings: {exc}"
    writer, why_not, version = choose_writer(
        df.sparkSession, writer, connect=connect, on_batch=on_batch is not None
    )
    why_not_jvm = why_not_jvm or why_not
    if writer == JVM:
        log.info("writer jvm: Kafka's Java producer, kafka-clients %s", version)
        if progress_interval_s:
            log.info("writer jvm: no progress lines yet (docs/jvm-writer.md)")
    else:
        java_settings = None
        log.info(
            "writer python: confluent-kafka in Spark's Python workers%s",
            f" (not the JVM writer: {why_not_jvm})" if why_not_jvm else "",
        )
    selected = _selected(repair.partitions if repair else None, len(ids))
    expected = _expected(repair.expected_rows, len(ids)) if repair else None
    spark = df.sparkSession
    if str(spark.conf.get("spark.speculation", "false")).lower() == "true":
        raise ConfigurationError(
            "spark.speculation is on: two attempts of one partition would fence each "
            "other's transaction; set spark.speculation=false for the prepare job"
        )
    job_label = job_label or uuid.uuid4().hex
    started = time.time()
    keys_required = require_keys if require_keys is not None else key_column is not None
    alignment, why_hash, pinned = _partitioning(
        df,
        repair,
        partitioning,
        align_with_kafka,
        producer_config,
        route.topics,
        len(ids),
        key_column,
        job_label,
        topic_partitions,
    )
    # columns, before the registry
    encode_columns(df, key_column, value_column, header_columns, wire=wire, route=route)
    if repair is None:  # a repair rewrites what a COMMIT verdict needs, whatever its age
        _check_timestamps(df, spec, producer_config, job_label, key_column)
    schemas = resolved_schemas(df, route, wire, key_column, value_column)
    prepared = partitioned_input(
        df,
        len(ids),
        key_column,
        value_column,
        header_columns,
        require_keys=keys_required,
        alignment=alignment,
        wire=wire,
        schemas=schemas,
        source_splits=pinned is not None,
        route=route,
        text_values=java_settings is not None,
    )
    splits = None
    describing = None
    if pinned is not None and repair is not None:  # before any count, cache or transaction
        splits = describe_splits(df, prepared, pinned)
        check_splits_unchanged(splits, _recorded_splits(repair))
        log.info("run %s: %d source splits unchanged, no shuffle", job_label, splits.splits)
    elif pinned is not None:  # only the manifest needs it: planned while the job writes
        describing = describe_meanwhile(df, prepared, pinned)
    if java_settings is None:
        python_writer = partition_writer(
            ids,
            # On Connect the function is pickled into the plan: secrets and files go apart.
            ship_settings(spark, producer_config) if is_connect(spark) else producer_config,
            list(route.topics) if route.several else route.topic,
            transaction_timeout_ms,
            list(header_columns),
            on_batch,
            progress=PartitionProgress(job_label, progress_interval_s)
            if progress_interval_s
            else None,
        )

        def run(data: DataFrame, only: Sequence[int] | None) -> list[Any]:
            chosen = python_writer if only is None else _only(python_writer, only)
            return data.mapInArrow(chosen, RESULT_SCHEMA).collect()

    else:
        settings = java_settings

        def run(data: DataFrame, only: Sequence[int] | None) -> list[Any]:
            return jvm_write(
                data,
                topics=list(route.topics),
                transactional_ids=ids,
                settings=settings,
                transaction_timeout_ms=transaction_timeout_ms,
                header_names=list(header_columns),
                selected=only,
            )

    if repair is None:
        try:
            reports = _write(prepared, run, None, ids, selected, key_column, route)
        except ConfigurationError:
            if pinned is not None:  # no shuffle: bad rows are found while writing
                _fence(producer_config, ids, job_label)
            raise
        finally:
            if describing is not None:  # it plans under the pinned settings: not past them
                wait([describing])
        if describing is not None:
            splits = _described(describing, producer_config, ids, job_label)
        partition_rows = _reported_rows(reports, len(ids))
    else:
        # The recorded counts are checked before any transaction opens, so the recomputed
        # input is cached and counted first; the writers then read the cache.
        prepared = prepared.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            try:
                partition_rows = _materialise(prepared, len(ids))
            except Exception as exc:  # the source cannot be read, or a required key is null
                refused = job_refusal(exc, key_column, route)
                if refused is None:
                    raise
                raise refused from None
            _check_unchanged(partition_rows, expected or ())
            if sum(partition_rows[i] for i in selected):
                reports = _write(prepared, run, selected, ids, selected, key_column, route)
            else:
                reports = []
        finally:
            prepared.unpersist()
    source_rows = sum(partition_rows[i] for i in selected)
    if source_rows == 0:
        log.warning("run %s: the source is empty; nothing prepared", job_label)
        return Manifest(
            job_label,
            route.topic,
            (),
            0,
            (),
            {"empty": True, "message": "source is empty; nothing prepared"},
            topics=route.topics,
        )
    written = selected if splits is None else [i for i in selected if i < splits.partitions]
    committables = _check_reports(reports, ids, partition_rows, written)
    if splits is not None and len(written) < len(selected):  # fewer splits than ids
        now_ms = int(time.time() * 1000)
        empty = [
            Committable.empty(ids[i], now_ms, transaction_timeout_ms)
            for i in selected
            if i >= splits.partitions
        ]
        committables = (*committables, *empty)
    partial = {"partitions": list(selected)} if len(selected) < len(ids) else {}
    batch = Manifest(
        job_label=job_label,
        topic=route.topic,
        topics=route.topics,
        committables=committables,
        source_rows=source_rows,
        partition_rows=partition_rows,
        metadata={
            "application_id": spark.conf.get("spark.app.id", None),
            "started_ms": int(started * 1000),
            "finished_ms": int(time.time() * 1000),
            "attempts": {str(r["partition"]): r["attempt"] for r in reports},
            "partitioning": SOURCE if splits else HASH if alignment is None else ALIGNED,
            **({"source_splits": splits.to_dict()} if splits else {}),
            "writer": writer,
            **({"writer_reason": why_not_jvm} if why_not_jvm else {}),
            **({"partitioning_reason": why_hash} if why_hash else {}),
            **({"topic_column": route.column} if route.several else {}),
            **partial,
        },
    )
    log.info(
        "run %s: prepared %d rows in %d transactions%s",
        job_label,
        source_rows,
        len(selected),
        f" (partitions {list(selected)} of {len(ids)})" if partial else "",
    )
    return batch


def _check_timestamps(
    df: DataFrame,
    spec: ExportSpec,
    producer_config: Mapping[str, Any],
    job_label: str,
    key_column: str | None,
) -> None:
    """The record timestamps against the topics' retention and limits (:mod:`.timestamps`);
    a bad value met by its aggregation is refused as the write would refuse it."""
    try:
        check_timestamps(df, spec, producer_config, job_label)
    except Kafka2pcError:
        raise
    except Exception as exc:  # Py4JJavaError / SparkRuntimeException: the aggregation failed
        refused = job_refusal(exc, key_column, spec.route)
        if refused is None:
            raise
        raise refused from None


def _write(
    prepared: DataFrame,
    run: Callable[[DataFrame, Sequence[int] | None], list[Any]],
    only: Sequence[int] | None,
    ids: Sequence[str],
    selected: Sequence[int],
    key_column: str | None,
    route: Routing | None = None,
) -> list[Any]:
    """Run the write job (``only``: those partitions); a failure names what to do with
    the ids it leaves open."""
    try:
        return run(prepared, only)
    except Exception as exc:  # Py4JJavaError / PythonException: the job failed
        refused = job_refusal(exc, key_column, route)
        if refused is not None:
            raise refused from None
        raise PrepareError(
            f"the prepare job failed ({type(exc).__name__}); some partitions may hold "
            f"open transactions: abort (fence) this run's ids {[ids[i] for i in selected]}"
        ) from exc


def _partitioning(
    df: DataFrame,
    repair: Repair | None,
    partitioning: str | None,
    align_with_kafka: bool,
    producer_config: Mapping[str, Any],
    topic: str | Sequence[str],
    partitions: int,
    key_column: str | None,
    job_label: str,
    topic_partitions: Future[dict[str, int]] | None = None,
) -> tuple[Alignment | None, str | None, dict[str, str | None] | None]:
    """How this prepare partitions, the topic checked on the way: (alignment, why not the
    partitioning asked, the pinned split settings when by source splits, else None).

    A repair follows its prepare's record; source splits it cannot recompute are refused.
    """
    spark = df.sparkSession
    recorded = repair.partitioning if repair else None
    check_partitioning(partitioning, align_with_kafka)
    why_not_source = None
    if recorded is None and partitioning == AUTO_PARTITIONING and is_connect(spark):
        why_not_source = "Spark Connect (no py4j to read the plan)"
    elif recorded == SOURCE or (recorded is None and partitioning in (SOURCE, AUTO_PARTITIONING)):
        recorded_splits = _recorded_splits(repair)  # pinned before the input is planned
        before = (
            None if recorded is not None else {k: spark.conf.get(k, None) for k in SPLIT_SETTINGS}
        )
        pinned = pin_settings(
            spark, partitions, recorded_splits.settings if recorded_splits else None
        )
        why_not_source = why_not_splittable(df)
        if why_not_source is None:
            _checked_topics(producer_config, topic, topic_partitions)
            return None, None, pinned
        if recorded == SOURCE:
            raise SourceChangedError(
                f"the prepare read the source's own splits, but now {why_not_source}; "
                "its partitions cannot be recomputed, nothing was written",
                (),
            )
        if before is not None:  # the shuffle reads the input as the session would have
            pin_settings(spark, partitions, before)
        if partitioning == SOURCE:
            log.warning("run %s: not by source splits: %s", job_label, why_not_source)
        else:
            log.info("run %s: not by source splits: %s", job_label, why_not_source)
    if recorded is None and partitioning == HASH:
        _checked_topics(producer_config, topic, topic_partitions)
        return None, why_not_source, None
    if recorded is None and align_with_kafka:  # needs the topic's partitions before the plan
        alignment, why_hash = kafka_alignment(
            spark, producer_config, topic, partitions, key_column, topic_partitions
        )
        if why_hash is not None:
            log.info("run %s: partitioned by hash, not aligned with Kafka: %s", job_label, why_hash)
        return alignment, "; ".join(r for r in (why_not_source, why_hash) if r) or None, None
    # by hash as asked, or a repair as its prepare did, whatever the topic is now
    _checked_topics(producer_config, topic, topic_partitions)
    alignment = None if recorded is None else recorded_alignment(spark, recorded, partitions)
    return alignment, why_not_source, None


def _described(
    describing: Future[SourceSplits],
    producer_config: Mapping[str, Any],
    ids: Sequence[str],
    job_label: str,
) -> SourceSplits:
    """The split record planned during the write; without it the batch cannot be
    repaired, so what the write opened is aborted before the error."""
    try:
        splits = describing.result()
    except Exception as exc:
        _fence(producer_config, ids, job_label)
        raise PrepareError(
            f"the source splits could not be recorded ({type(exc).__name__}: {exc}); "
            "this run's transactions were aborted"
        ) from exc
    log.info(
        "run %s: %d source splits in %d partitions, no shuffle",
        job_label,
        splits.splits,
        splits.partitions,
    )
    return splits


def _recorded_splits(repair: Repair | None) -> SourceSplits | None:
    """The repaired prepare's recorded source splits (None outside a repair)."""
    if repair is None:
        return None
    if repair.source_splits is None:
        raise ConfigurationError(
            "the prepare being repaired read the source's own splits, but no record of them "
            "was given (source_splits): its partitions cannot be recomputed; nothing was written"
        )
    return SourceSplits.from_dict(repair.source_splits)


def _fence(producer_config: Mapping[str, Any], ids: Sequence[str], job_label: str) -> None:
    """Abort what a refused source-split prepare opened: without a shuffle, a bad row is
    found by the writing task, after other partitions opened their transactions."""
    from ..transaction.controller import TransactionController

    with KafkaProtocol(producer_config) as protocol:
        controller = TransactionController(protocol)
        for tid in ids:
            controller.fence(tid)
    log.info("run %s: refused; aborted what its ids held open", job_label)


def kafka_alignment(
    spark: SparkSession,
    producer_config: Mapping[str, Any],
    topic: str | Sequence[str],
    partitions: int,
    key_column: str | None,
    checking: Future[dict[str, int]] | None = None,
) -> tuple[Alignment | None, str | None]:
    """The topics checked (or the answer of ``checking``, their check under way), then
    ``partitions`` Spark partitions aligned with their Kafka partitions where that applies
    (:mod:`.alignment`: every topic's partition count a multiple of ``partitions``; a
    participant then owns the partitions ``p mod N`` = its index of every topic); else no
    alignment and why not, naming the topic when there are several."""
    counts = _checked_topics(producer_config, topic, checking)
    why = None
    for name, kafka_partitions in counts.items():
        why = why_not_aligned(kafka_partitions, partitions, key_column, producer_config)
        if why is not None:
            why = why.replace("the topic's", f"topic {name!r}'s") if len(counts) > 1 else why
            break
    why = why or register_key_hash(spark)
    if why is not None:
        return None, why
    return Alignment(partitions), None


def recorded_alignment(spark: SparkSession, partitioning: str, partitions: int) -> Alignment | None:
    """A repair's partitioning: its prepare's, as recorded, whatever the topic is now.

    Had it decided afresh, partitions added to the topic since (or a session that cannot
    load the key hash) would move rows between transactions; the per-partition counts would
    then refuse the repair, or, were they equal by chance, let it write other rows than
    those lost. Aligned membership needs only N (:mod:`.alignment`), so it is recomputed
    exactly; a session that cannot compute it is refused.
    """
    if partitioning not in PARTITIONINGS:
        raise ConfigurationError(
            f"unknown partitioning {partitioning!r} for the repair; one of {PARTITIONINGS}"
        )
    if partitioning in (HASH, SOURCE):  # SOURCE: recomputed from the recorded splits
        return None
    why = register_key_hash(spark)
    if why is not None:
        raise ConfigurationError(
            f"the prepare being repaired partitioned its rows aligned with Kafka, which this "
            f"session cannot recompute: {why}; nothing was written"
        )
    return Alignment(partitions)


def _reported_rows(reports: Sequence[Any], partitions: int) -> tuple[int, ...]:
    """Rows per partition as the writers read them (a partition that did not report: 0,
    and :func:`_check_reports` names it)."""
    rows = dict.fromkeys(range(partitions), 0)
    for report in reports:
        rows[report["partition"]] = report["input_rows"]
    return tuple(rows[p] for p in range(partitions))


def _selected(only_partitions: Sequence[int] | None, partitions: int) -> tuple[int, ...]:
    """The partition indexes to write, ascending; all of them by default."""
    if only_partitions is None:
        return tuple(range(partitions))
    chosen = list(only_partitions)
    bad = [i for i in chosen if isinstance(i, bool) or not isinstance(i, int)]
    bad += [i for i in chosen if isinstance(i, int) and not 0 <= i < partitions]
    if not chosen or bad:
        raise ConfigurationError(
            f"the repair's partitions must be indexes in 0..{partitions - 1} "
            f"(one per transactional id), got {chosen}"
        )
    if len(set(chosen)) != len(chosen):
        raise ConfigurationError(f"the repair names a partition twice: {chosen}")
    return tuple(sorted(chosen))


def _expected(rows: Sequence[int], partitions: int) -> tuple[int, ...]:
    counts = tuple(rows)
    if len(counts) != partitions or any(
        isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in counts
    ):
        raise ConfigurationError(
            f"the repair's expected_rows must hold {partitions} counts >= 0 (one per "
            f"transactional id), got {list(counts)}"
        )
    return counts


def _check_unchanged(partition_rows: Sequence[int], expected: Sequence[int]) -> None:
    changed = [
        f"partition {i}: {now} rows now, {then} recorded"
        for i, (now, then) in enumerate(zip(partition_rows, expected, strict=True))
        if now != then
    ]
    if changed:
        raise SourceChangedError(
            f"the source changed since the batch was prepared ({sum(partition_rows)} rows now, "
            f"{sum(expected)} recorded; {'; '.join(changed)}): its partitions cannot be "
            "recomputed, nothing was written",
            partition_rows,
        )


def _only(writer: Any, selected: Sequence[int]) -> Any:
    """The ``mapInArrow`` function restricted to ``selected`` partitions: the others read
    their (cached) input and write nothing, not even an InitProducerId for their id."""
    chosen = frozenset(selected)

    def write_selected(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        if TaskContext.get().partitionId() in chosen:
            yield from writer(batches)

    return write_selected


def _checked_topics(
    producer_config: Mapping[str, Any],
    topic: str | Sequence[str],
    checking: Future[dict[str, int]] | None,
) -> dict[str, int]:
    """The answer of ``checking`` (:func:`_check_topics` started ahead), else the check now."""
    if checking is not None:
        return checking.result()
    return _check_topics(producer_config, topic)


def _check_topics(producer_config: Mapping[str, Any], topic: str | Sequence[str]) -> dict[str, int]:
    """Each topic's number of partitions, every one checked; the first unusable named."""
    topics = [topic] if isinstance(topic, str) else list(topic)
    return {t: _check_topic(producer_config, t) for t in topics}


def _check_topic(producer_config: Mapping[str, Any], topic: str) -> int:
    """The topic's number of partitions; a clear error when it cannot be used."""
    check_tls(producer_config)  # a TLS problem named before any executor writes
    with KafkaProtocol(producer_config) as protocol:
        try:
            return len(protocol.partition_leaders(topic))
        except ProtocolError as exc:
            refused = authorization_error(
                exc, producer_config, f"use topic {topic!r}", topics=[topic]
            )
            if refused is not None:
                raise refused from None
            raise ConfigurationError(
                f"topic {topic!r} is not usable at {producer_config.get('bootstrap.servers')}: "
                f"{exc.error_name}; create it first"
            ) from None


def _materialise(prepared: DataFrame, partitions: int) -> tuple[int, ...]:
    """One job fills the (persisted) input's cache and counts its rows per partition."""
    stats = (
        prepared.groupBy(F.spark_partition_id().alias("p"))
        .agg(F.count(F.lit(1)).alias("rows"))
        .collect()
    )
    rows = {r["p"]: r["rows"] for r in stats}
    return tuple(rows.get(p, 0) for p in range(partitions))


def _check_reports(
    reports: list[Any],
    ids: Sequence[str],
    partition_rows: Sequence[int],
    selected: Sequence[int] | None = None,
) -> tuple[Committable, ...]:
    by_partition: dict[int, list[Any]] = {}
    for report in reports:
        by_partition.setdefault(report["partition"], []).append(report)
    problems = []
    committables = []
    for partition in range(len(ids)) if selected is None else selected:
        tid = ids[partition]
        got = by_partition.get(partition, [])
        if len(got) != 1:
            problems.append(f"partition {partition} reported {len(got)} committables")
            continue
        committable = Committable.from_dict(json.loads(got[0]["committable"]))
        if committable.transactional_id != tid:
            problems.append(f"partition {partition} wrote under {committable.transactional_id}")
        if not (committable.record_count == got[0]["input_rows"] == partition_rows[partition]):
            problems.append(
                f"partition {partition}: {partition_rows[partition]} rows counted, "
                f"{got[0]['input_rows']} read, {committable.record_count} delivered"
            )
        committables.append(committable)
    if problems:
        raise PrepareError("prepare incomplete, abort this run's ids: " + "; ".join(problems))
    return tuple(committables)
