"""Driver side of the prepare phase: a DataFrame becomes one prepared transaction per partition.

Order of work, chosen so that a transaction is open only while its records are written
(Kafka aborts it when it outlives ``transaction.timeout.ms``) and the input is read once:

1. plan (:mod:`.plan`, no Spark job, no transaction): the ids, the writer and why, the
   partitioning and why, the topics checked, the refusals; then the columns and types, the
   record timestamps against the topics (:mod:`.timestamps`) and the registry's schemas;
2. partition deterministically (a stable hash of the key, or of the whole row; or, with
   ``align_with_kafka``, the owner of the key's Kafka partition: :mod:`.alignment`) so a
   recomputed partition holds the same records, and encode key/value/headers in the JVM.
   A required key that is null fails this shuffle's map stage, which Spark finishes before
   any writing task starts: bad keys are refused before any transaction opens.
   With ``partitioning=SOURCE`` there is no shuffle: the source's own file splits are
   the partitions (:mod:`.source_splits`), and a bad row found while writing aborts
   every id of the run before the refusal;
3. write with the writer the plan chose (:mod:`.transaction_writers`: Python, JVM by
   py4j, JVM by the ``kafka2pc`` DataSource): each partition writes its transaction and
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

Over 500 lines: :func:`prepare_dataframe`'s documentation of every option is a third of it;
the plan is :mod:`.plan`, the encoding :mod:`.encoding`, the writers
:mod:`.transaction_writers`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, wait
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .. import defaults
from ..errors import (
    ConfigurationError,
    Kafka2pcError,
    PrepareError,
    SourceChangedError,
)
from ..protocol.client import KafkaProtocol
from ..transaction.committable import Committable
from ..transaction.manifest import ALIGNED, HASH, SOURCE, Manifest
from ..transaction.routing import Routing
from .encoding import encode_columns, job_refusal, partitioned_input, resolved_schemas
from .export_spec import ExportSpec
from .failure import job_message
from .job import Repair
from .jvm_writer import AUTO
from .partition_writer import (
    ArrowBatchCallback,
)
from .partitionings import AUTO_PARTITIONING
from .plan import (  # noqa: F401 -- _check_topic(s), kafka_alignment: importable here too
    PreparePlan,
    _check_topic,
    _check_topics,
    _recorded_splits,
    kafka_alignment,
    plan_prepare,
)
from .source_splits import (
    SourceSplits,
    describe_meanwhile,
    restoring_settings,
)
from .source_splits import check_unchanged as check_splits_unchanged
from .source_splits import describe as describe_splits
from .timestamps import check_timestamps
from .transaction_writers import TransactionWriter, writer_for
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

    The plan first (:func:`~.plan.plan_prepare`: no Spark job, no transaction), then the
    record timestamps against the topics, the encoded input, and the chosen writer.
    """
    plan = plan_prepare(
        df,
        spec,
        transactional_ids=transactional_ids,
        producer_config=producer_config,
        job_label=job_label,
        require_keys=require_keys,
        on_batch=on_batch is not None,
        repair=repair,
        topic_partitions=topic_partitions,
    )
    wire = WireOptions(
        registry=registry,
        value_format=spec.value_format,
        key_format=spec.key_format,
        tombstone_when=spec.tombstone_when,
        timestamp_column=spec.timestamp_column,
    )
    route, key_column = spec.route, spec.key_column
    header_columns = list(spec.header_columns)
    # columns, before the registry and before any Spark job
    encode_columns(df, key_column, spec.value_column, header_columns, wire=wire, route=route)
    if repair is None:  # a repair rewrites what a COMMIT verdict needs, whatever its age
        _check_timestamps(df, spec, producer_config, plan.job_label, key_column)
    prepared = partitioned_input(
        df,
        len(plan.ids),
        key_column,
        spec.value_column,
        header_columns,
        require_keys=plan.keys_required,
        alignment=plan.alignment,
        wire=wire,
        schemas=resolved_schemas(df, route, wire, key_column, spec.value_column),
        source_splits=plan.pinned is not None,
        route=route,
        text_values=plan.java_settings is not None,
    )
    writer = writer_for(plan, df, producer_config, on_batch)
    if repair is None:
        written = _write_prepare(plan, df, prepared, writer, producer_config)
    else:
        written = _write_repair(plan, df, prepared, writer, repair)
    return _manifest(plan, df.sparkSession, *written)


def _write_prepare(
    plan: PreparePlan,
    df: DataFrame,
    prepared: DataFrame,
    writer: TransactionWriter,
    producer_config: Mapping[str, Any],
) -> tuple[list[Any], tuple[int, ...], SourceSplits | None]:
    """Every partition written: (reports, rows per partition, the source splits used)."""
    ids, key_column, route = plan.ids, plan.spec.key_column, plan.spec.route
    describing = None
    if plan.pinned is not None:  # only the manifest needs it: planned while the job writes
        describing = describe_meanwhile(df, prepared, plan.pinned)
    try:
        reports = _write(prepared, writer.write, None, ids, plan.selected, key_column, route)
    except ConfigurationError:
        if plan.pinned is not None:  # no shuffle: bad rows are found while writing
            _fence(producer_config, ids, plan.job_label)
        raise
    finally:
        if describing is not None:  # it plans under the pinned settings: not past them
            wait([describing])
    splits = None
    if describing is not None:
        splits = _described(describing, producer_config, ids, plan.job_label)
    return reports, _reported_rows(reports, len(ids)), splits


def _write_repair(
    plan: PreparePlan,
    df: DataFrame,
    prepared: DataFrame,
    writer: TransactionWriter,
    repair: Repair,
) -> tuple[list[Any], tuple[int, ...], SourceSplits | None]:
    """The lost partitions written, only if the recomputed input still holds the recorded
    rows: the counts are checked before any transaction opens, so the input is cached and
    counted first, and the writer reads the cache."""
    ids, key_column, route = plan.ids, plan.spec.key_column, plan.spec.route
    splits = None
    if plan.pinned is not None:  # before any count, cache or transaction
        splits = describe_splits(df, prepared, plan.pinned)
        check_splits_unchanged(splits, _recorded_splits(repair))
        log.info("run %s: %d source splits unchanged, no shuffle", plan.job_label, splits.splits)
    prepared = prepared.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        try:
            partition_rows = _materialise(prepared, len(ids))
        except Exception as exc:  # the source cannot be read, or a required key is null
            refused = job_refusal(exc, key_column, route)
            if refused is None:
                raise
            raise refused from None
        _check_unchanged(partition_rows, plan.expected or ())
        reports = []
        if sum(partition_rows[i] for i in plan.selected):
            only = plan.selected
            reports = _write(prepared, writer.write, only, ids, only, key_column, route)
    finally:
        prepared.unpersist()
    return reports, partition_rows, splits


def _manifest(
    plan: PreparePlan,
    spark: SparkSession,
    reports: list[Any],
    partition_rows: tuple[int, ...],
    splits: SourceSplits | None,
) -> Manifest:
    """The prepare's manifest: one committable per selected partition, checked against the
    rows each read, and what was used and why."""
    ids, selected, route = plan.ids, plan.selected, plan.spec.route
    source_rows = sum(partition_rows[i] for i in selected)
    if source_rows == 0:
        log.warning("run %s: the source is empty; nothing prepared", plan.job_label)
        return Manifest(
            plan.job_label,
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
        timeout_ms = plan.spec.transaction_timeout_ms
        empty = [Committable.empty(ids[i], now_ms, timeout_ms) for i in selected[len(written) :]]
        committables = (*committables, *empty)
    partial = {"partitions": list(selected)} if len(selected) < len(ids) else {}
    log.info(
        "run %s: prepared %d rows in %d transactions%s",
        plan.job_label,
        source_rows,
        len(selected),
        f" (partitions {list(selected)} of {len(ids)})" if partial else "",
    )
    return Manifest(
        job_label=plan.job_label,
        topic=route.topic,
        topics=route.topics,
        committables=committables,
        source_rows=source_rows,
        partition_rows=partition_rows,
        metadata={
            "application_id": spark.conf.get("spark.app.id", None),
            "started_ms": int(plan.started * 1000),
            "finished_ms": int(time.time() * 1000),
            "attempts": {str(r["partition"]): r["attempt"] for r in reports},
            "partitioning": SOURCE if splits else HASH if plan.alignment is None else ALIGNED,
            **({"source_splits": splits.to_dict()} if splits else {}),
            "writer": plan.writer.writer,
            **({"writer_reason": why} if (why := plan.writer.reason) else {}),
            **({"partitioning_reason": why} if (why := plan.why_hash) else {}),
            **({"topic_column": route.column} if route.several else {}),
            **partial,
        },
    )


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
            f"the prepare job failed ({job_message(exc)}); some partitions may hold "
            f"open transactions: abort (fence) this run's ids {[ids[i] for i in selected]}"
        ) from exc


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
    except Exception as exc:  # whatever the planning thread raised: nothing may stay open
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


def _fence(producer_config: Mapping[str, Any], ids: Sequence[str], job_label: str) -> None:
    """Abort what a refused source-split prepare opened: without a shuffle, a bad row is
    found by the writing task, after other partitions opened their transactions."""
    from ..transaction.controller import TransactionController

    with KafkaProtocol(producer_config) as protocol:
        controller = TransactionController(protocol)
        for tid in ids:
            controller.fence(tid)
    log.info("run %s: refused; aborted what its ids held open", job_label)


def _reported_rows(reports: Sequence[Any], partitions: int) -> tuple[int, ...]:
    """Rows per partition as the writers read them (a partition that did not report: 0,
    and :func:`_check_reports` names it)."""
    rows = dict.fromkeys(range(partitions), 0)
    for report in reports:
        rows[report["partition"]] = report["input_rows"]
    return tuple(rows[p] for p in range(partitions))


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
