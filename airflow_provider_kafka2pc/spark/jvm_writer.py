"""The JVM writer: Kafka's own Java producer writes each partition's transaction in the executor.

The Python writer (:mod:`.partition_writer`) hands every record from the executor's JVM to
a Python worker (Arrow), then one by one to librdkafka. Here the rows stay in the JVM, as
with Spark's own Kafka sink: the driver calls ``kafka2pc.spark.JvmWriter.prepare`` (our jar,
``jvm/``) through py4j on the encoded DataFrame, and each task runs Kafka's
``KafkaProducer`` with public client APIs only (docs/jvm-writer.md says why no reflection
is needed): ``initTransactions`` (fences a failed earlier attempt), ``beginTransaction``,
``send`` per row, ``flush``, then the producer id and epoch from DescribeTransactions, and
``close(Duration.ZERO)``, which leaves the transaction open. Each task returns the Python
writer's result row (:data:`.partition_writer.RESULT_SCHEMA`), so everything downstream is
shared.

kafka-clients reaches the executors like this: a session that already has it (spark-submit
``--packages org.apache.kafka:kafka-clients:4.4.0`` or ``--jars``, ``spark.jars``) uses it;
any other gets :data:`KAFKA_CLIENTS`'s jar fetched once into kafka2pc's cache
(``~/.cache/kafka2pc``, with Apache Ivy from PySpark, a mirror by
``KAFKA2PC_MAVEN_REPOSITORY``: :mod:`.maven`) and added with ``ADD JAR``, which ships it to
the executors. Only that jar: Spark ships its dependencies (lz4, snappy, zstd, slf4j).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from py4j.java_gateway import JavaClass
from py4j.protocol import Py4JError
from pyspark.sql import DataFrame, SparkSession

from ..errors import BrokerFetchError, ConfigurationError
from .alignment import JAR
from .connect import FILE_SETTINGS, is_connect
from .connect_artifacts import ensure_jvm_writer
from .connect_jvm import connect_jvm_write, probe
from .jvm_settings import java_producer_settings
from .maven import fetch_jar
from .writers import AUTO_WRITER as AUTO
from .writers import JVM_WRITER as JVM
from .writers import PYTHON_WRITER as PYTHON
from .writers import WRITERS, check_writer

__all__ = [
    "AUTO",
    "JVM",
    "PYTHON",
    "WRITERS",
    "check_writer",
    "choose_writer",
    "connect_files",
    "ensure_on_classpath",
    "jvm_write",
]

log = logging.getLogger(__name__)

#: The Java client the JVM writer runs: 4.x implements KIP-890 (TV2) transactions.
KAFKA_CLIENTS_VERSION = "4.4.0"
KAFKA_CLIENTS = f"org.apache.kafka:kafka-clients:{KAFKA_CLIENTS_VERSION}"
WRITER_CLASS = "kafka2pc.spark.JvmWriter"
#: The task local property (on Spark Connect: the session setting) naming the JVM writer's
#: extension point, ``class[:argument]``: a ``kafka2pc.spark.WriterHook`` on the session's
#: class path, called after each record sent (``jvm/src/kafka2pc/spark/WriterHook.java``).
#: Unset, as in production, nothing is loaded; the tests' fault hook is in a jar of their own.
HOOK_PROPERTY = "kafka2pc.writer.hook"


def jvm_write(
    prepared: DataFrame,
    *,
    topics: Sequence[str],
    transactional_ids: Sequence[str],
    settings: Mapping[str, str],
    transaction_timeout_ms: int,
    header_names: Sequence[str],
    selected: Sequence[int] | None,
) -> list[Any]:
    """Run the write job (call :func:`ensure_on_classpath` first); one result row per
    written partition. With several ``topics`` each row names its own
    (:data:`.partition_writer.TOPIC`).

    ``settings`` are the Java producer's (:func:`java_producer_settings`). They reach the
    executors inside the task's function object only, never in the plan's text: its
    ``toString`` names the topic and the number of ids. On Spark Connect the job runs
    through our jar's DataSource on the server (:mod:`.connect_jvm`).
    """
    spark = prepared.sparkSession
    if is_connect(spark):
        return connect_jvm_write(
            prepared,
            topics=topics,
            transactional_ids=transactional_ids,
            settings=settings,
            transaction_timeout_ms=transaction_timeout_ms,
            header_names=header_names,
            selected=selected,
        )
    writer = _writer_class(spark)
    jdf = writer.prepare(
        prepared._jdf,
        list(topics),
        list(transactional_ids),
        dict(settings),
        int(transaction_timeout_ms),
        list(header_names),
        None if selected is None else list(selected),
    )
    return DataFrame(jdf, spark).collect()


def producer_settings(config: Mapping[str, Any], transaction_timeout_ms: int) -> dict[str, str]:
    """The settings checked and translated on the driver, before any transaction opens."""
    return java_producer_settings(config, transaction_timeout_ms)


def ensure_on_classpath(spark: SparkSession) -> str:
    """Make kafka-clients and our jar loadable by the driver and the executors; returns
    the kafka-clients version the JVM loads.

    kafka-clients is added first, before anything calls into our classes: the JVM caches a
    failed class resolution, so a writer class that once missed KafkaProducer would miss it
    for good in this session.
    """
    jvm = spark.sparkContext._jvm
    if not isinstance(jvm.org.apache.kafka.clients.producer.KafkaProducer, JavaClass):
        _add_jar(spark, kafka_clients_jar())
    if not isinstance(_writer_class(spark), JavaClass):
        _add_jar(spark, JAR)
    try:
        return str(_writer_class(spark).kafkaClientsVersion())
    except (TypeError, Py4JError) as exc:  # the class missing: py4j's JavaPackage is not
        # callable (TypeError); a Java error (Py4JJavaError)
        raise ConfigurationError(
            f"the JVM writer cannot load {WRITER_CLASS} and kafka-clients ({type(exc).__name__});"
            f" start Spark with --packages {KAFKA_CLIENTS} and --jars {JAR}, or use "
            "writer='python'"
        ) from None


def choose_writer(
    spark: SparkSession, writer: str, *, connect: bool, on_batch: bool
) -> tuple[str, str | None, str | None]:
    """(the writer to use, why not the JVM one under ``auto``, the kafka-clients version
    loaded for the JVM writer).

    ``auto`` takes the JVM writer wherever it applies: no ``on_batch`` hook (it runs in
    Python workers), and a JVM that loads our jar and kafka-clients: on a classic session
    (``connect`` False) the driver's (:func:`ensure_on_classpath`), on Spark Connect the
    server's, from its class path (``--jars``); else the Python writer, and why. An
    explicit ``jvm`` on a Connect server without them ships them with the session as
    artifacts (:func:`.connect_artifacts.ensure_jvm_writer`); ``auto`` does not: measured
    on a warm plain server, shipping them (about 11 MB per session, and their classes
    loaded afresh) cost what the JVM writer saves (docs/spark-connect.md). An explicit
    ``jvm`` that cannot load them fails with the jars it needs.
    """
    writer = check_writer(writer)
    if writer == PYTHON:
        return PYTHON, None, None
    if writer == AUTO:
        if on_batch:
            return PYTHON, "an on_batch hook runs in Python workers", None
        try:
            return JVM, None, load_jvm_writer(spark, connect, ship=False)
        except (ConfigurationError, BrokerFetchError) as exc:
            return PYTHON, f"the JVM writer cannot load here: {exc}", None
    if on_batch:
        raise ConfigurationError("on_batch runs in Python workers: writer='python' only")
    try:
        return JVM, None, load_jvm_writer(spark, connect, ship=True)
    except ConfigurationError as exc:
        if not connect:
            raise
        raise ConfigurationError(f"writer='jvm' on Spark Connect: {exc}") from None


def connect_files(config: Mapping[str, Any]) -> list[str]:
    """The settings naming a file on this (Connect client's) machine: the Python writer
    ships them to the executors as session artifacts, the JVM writer reads its files where
    the executors run, so on Connect it cannot take them."""
    return sorted(
        key
        for key in FILE_SETTINGS
        if isinstance(config.get(key), str) and Path(str(config[key])).is_file()
    )


def load_jvm_writer(spark: SparkSession, connect: bool, *, ship: bool = True) -> str:
    """The kafka-clients version the session loads the JVM writer with; on Spark Connect,
    with ``ship``, the jars shipped as session artifacts where the server lacks them.

    :raises ConfigurationError: it cannot load them (here, or without shipping them).
    """
    if connect:
        if not ship:
            return probe(spark, KAFKA_CLIENTS)
        return ensure_jvm_writer(spark, KAFKA_CLIENTS, kafka_clients_jar)
    return ensure_on_classpath(spark)


def _writer_class(spark: SparkSession) -> Any:
    """py4j names a class it cannot load a package (``JavaPackage``)."""
    return spark.sparkContext._jvm.kafka2pc.spark.JvmWriter  # type: ignore[union-attr]


def _add_jar(spark: SparkSession, jar: Path) -> None:
    quoted = str(jar).replace("'", "\\'")
    spark.sql(f"ADD JAR '{quoted}'")


def kafka_clients_jar(cache_dir: Path | None = None, timeout_s: float = 300) -> Path:
    """kafka-clients :data:`KAFKA_CLIENTS_VERSION`'s jar, fetched once with Apache Ivy
    (without its dependencies, which Spark ships) into ``<cache>/kafka-clients-<version>``."""
    return fetch_jar(KAFKA_CLIENTS, cache_dir, timeout_s)
