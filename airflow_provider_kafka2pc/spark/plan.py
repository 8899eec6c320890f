"""The prepare's plan: what a prepare will do, decided before any Spark action and before
any transaction opens, as Spark's ``WriteBuilder`` decides before its ``BatchWrite`` writes.

:func:`plan_prepare` gathers the facts (is the session Spark Connect, can the Java producer
take these settings, does the session load the JVM writer, is speculation on, how many
partitions the topics have, does the source pin its splits) and decides, with a reason a
person can act on for every choice not taken: the writer (:func:`decide_writer`, pure), the
refusals of the run (:func:`run_refusals`, pure), and the partitioning
(:func:`_partitioning`). :mod:`.prepare` then encodes and writes by the plan
(:mod:`.transaction_writers`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from .. import defaults
from ..connection.acls import authorization_error
from ..connection.tls import check_tls
from ..errors import ConfigurationError, ProtocolError, SourceChangedError
from ..naming import validate_transactional_id
from ..protocol.client import KafkaProtocol
from ..transaction.manifest import HASH, PARTITIONINGS, SOURCE
from .alignment import Alignment, register_key_hash, why_not_aligned
from .connect import is_connect
from .export_spec import ExportSpec
from .job import Repair
from .jvm_writer import AUTO, JVM, PYTHON, connect_files, load_jvm_writer, producer_settings
from .partitionings import AUTO_PARTITIONING, check_partitioning
from .source_splits import SPLIT_SETTINGS, SourceSplits, pin_settings, why_not_splittable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WriterFacts:
    """What decides the writer, as :func:`plan_prepare` found it."""

    connect: bool
    on_batch: bool = False
    #: Why Kafka's Java producer cannot take the settings (None: it can, or not asked).
    settings_refused: str | None = None
    #: The kafka-clients version the session loads the JVM writer with (None: not loaded).
    jvm_version: str | None = None
    #: Why the session cannot load the JVM writer (None: it can, or not asked).
    jvm_refused: Exception | None = field(default=None, compare=False)


@dataclass(frozen=True)
class WriterChoice:
    """The writer a prepare uses, and why not the JVM one where ``auto`` could not."""

    writer: str
    reason: str | None = None
    kafka_clients: str | None = None


def decide_writer(asked: str, facts: WriterFacts) -> WriterChoice:
    """The writer for ``asked`` (auto, python or jvm) given ``facts``; an explicit ``jvm``
    that cannot run here is refused with what it needs. Pure: a table of cases."""
    if asked == PYTHON:
        return WriterChoice(PYTHON)
    if facts.on_batch:
        if asked == JVM:
            raise ConfigurationError("on_batch runs in Python workers: writer='python' only")
        return WriterChoice(PYTHON, "an on_batch hook runs in Python workers")
    if facts.settings_refused is not None:
        if asked == JVM:
            raise ConfigurationError(facts.settings_refused)
        why = f"the Java producer cannot take these settings: {facts.settings_refused}"
        return WriterChoice(PYTHON, why)
    if facts.jvm_version is not None:
        return WriterChoice(JVM, None, facts.jvm_version)
    refused = facts.jvm_refused or ConfigurationError("the JVM writer was not probed")
    if asked == AUTO:
        return WriterChoice(PYTHON, f"the JVM writer cannot load here: {refused}")
    if facts.connect and isinstance(refused, ConfigurationError):
        raise ConfigurationError(f"writer='jvm' on Spark Connect: {refused}") from None
    raise refused


def run_refusals(
    spec: ExportSpec, ids: Sequence[str], *, connect: bool, speculation: bool
) -> list[str]:
    """What forbids this run before anything is decided further; empty when nothing does.
    Pure: a table of cases."""
    refusals = []
    if not ids:
        refusals.append("transactional_ids must name at least one id")
    elif len(set(ids)) != len(ids):
        refusals.append("transactional_ids must be distinct")
    if connect and spec.partitioning == SOURCE:
        # It reads the plan through py4j, which a Connect client has not.
        refusals.append(
            "on Spark Connect the prepare runs with a shuffle; "
            f"partitioning={spec.partitioning!r} needs a classic session (spark-submit)"
        )
    if speculation:
        refusals.append(
            "spark.speculation is on: two attempts of one partition would fence each "
            "other's transaction; set spark.speculation=false for the prepare job"
        )
    return refusals


@dataclass(frozen=True)
class PreparePlan:
    """Everything decided before the write: the ids, the writer and why, how the rows are
    partitioned and why, which partitions a repair writes."""

    spec: ExportSpec
    ids: tuple[str, ...]
    job_label: str
    started: float
    writer: WriterChoice
    #: The Java producer's settings with the JVM writer (None with the Python one).
    java_settings: Mapping[str, str] | None
    alignment: Alignment | None
    #: Why not the partitioning asked (None: as asked).
    why_hash: str | None
    #: The pinned split settings when partitioned by source splits, else None.
    pinned: Mapping[str, str | None] | None
    #: The partition indexes to write (all of them outside a repair).
    selected: tuple[int, ...]
    #: A repair's expected rows per partition (None outside a repair).
    expected: tuple[int, ...] | None
    keys_required: bool


def plan_prepare(
    df: DataFrame,
    spec: ExportSpec,
    *,
    transactional_ids: Sequence[str],
    producer_config: Mapping[str, Any],
    job_label: str | None = None,
    require_keys: bool | None = None,
    on_batch: bool = False,
    repair: Repair | None = None,
    topic_partitions: Future[dict[str, int]] | None = None,
) -> PreparePlan:
    """The plan of a prepare (:class:`PreparePlan`); a clear error for what forbids it.
    No Spark job runs and no transaction opens here; the topics are checked on the way."""
    spark = df.sparkSession
    connect = is_connect(spark)
    ids = tuple(validate_transactional_id(t, "transactional_ids[]") for t in transactional_ids)
    speculation = str(spark.conf.get("spark.speculation", "false")).lower() == "true"
    refusals = run_refusals(spec, ids, connect=connect, speculation=speculation)
    if refusals:
        raise ConfigurationError("; ".join(refusals))
    facts, java_settings = _writer_facts(spark, spec, producer_config, connect, on_batch)
    choice = decide_writer(spec.writer, facts)
    _log_writer(choice, spec)
    selected = _selected(repair.partitions if repair else None, len(ids))
    expected = _expected(repair.expected_rows, len(ids)) if repair else None
    job_label = job_label or uuid.uuid4().hex
    started = time.time()
    alignment, why_hash, pinned = _partitioning(
        df,
        repair,
        spec.partitioning,
        spec.align_with_kafka,
        producer_config,
        spec.route.topics,
        len(ids),
        spec.key_column,
        job_label,
        topic_partitions,
    )
    return PreparePlan(
        spec=spec,
        ids=ids,
        job_label=job_label,
        started=started,
        writer=choice,
        java_settings=java_settings if choice.writer == JVM else None,
        alignment=alignment,
        why_hash=why_hash,
        pinned=pinned,
        selected=selected,
        expected=expected,
        keys_required=require_keys if require_keys is not None else spec.key_column is not None,
    )


def _writer_facts(
    spark: SparkSession,
    spec: ExportSpec,
    producer_config: Mapping[str, Any],
    connect: bool,
    on_batch: bool,
) -> tuple[WriterFacts, dict[str, str] | None]:
    """The facts :func:`decide_writer` needs, probed only as far as they matter: the
    settings translated before the session is asked to load the JVM writer."""
    facts = WriterFacts(connect=connect, on_batch=on_batch)
    if spec.writer == PYTHON or on_batch:
        return facts, None
    try:
        settings = producer_settings(producer_config, spec.transaction_timeout_ms)
        files = connect_files(producer_config) if connect else []
        if files:
            raise ConfigurationError(
                f"on Spark Connect the JVM writer cannot ship local files ({files}); "
                "the Python writer ships them as session artifacts"
            )
    except ConfigurationError as exc:
        return WriterFacts(connect, on_batch, settings_refused=str(exc)), None
    try:
        # auto probes; an explicit jvm also ships the jars to a Connect server that lacks them
        version = load_jvm_writer(spark, connect, ship=spec.writer == JVM)
    except Exception as exc:  # ConfigurationError, BrokerFetchError: kept for decide_writer
        return WriterFacts(connect, on_batch, jvm_refused=_unprefixed(exc)), settings
    return WriterFacts(connect, on_batch, jvm_version=version), settings


def _unprefixed(exc: Exception) -> Exception:
    """``exc`` without :func:`choose_writer`'s Connect prefix (decide_writer adds it)."""
    prefix = "writer='jvm' on Spark Connect: "
    if isinstance(exc, ConfigurationError) and str(exc).startswith(prefix):
        return ConfigurationError(str(exc)[len(prefix) :])
    return exc


def _log_writer(choice: WriterChoice, spec: ExportSpec) -> None:
    if choice.writer == JVM:
        log.info("writer jvm: Kafka's Java producer, kafka-clients %s", choice.kafka_clients)
        if spec.progress_interval_s:
            log.info("writer jvm: no progress lines yet (docs/jvm-writer.md)")
        return
    log.info(
        "writer python: confluent-kafka in Spark's Python workers%s",
        f" (not the JVM writer: {choice.reason})" if choice.reason else "",
    )


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
            return len(protocol.partition_leaders(topic, wait_s=defaults.TOPIC_WAIT_S))
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
