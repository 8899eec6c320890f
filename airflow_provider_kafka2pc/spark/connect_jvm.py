"""The JVM writer on Spark Connect: our jar's DataSource ``kafka2pc``, run by the server.

A Connect client has no py4j into the server's JVM, so it cannot call
``kafka2pc.spark.JvmWriter`` as a classic session does; it reaches the same executor code
(``PartitionTransaction``) through Spark's public DataSource V2 write API:
``df.write.format("kafka2pc").options(...).mode("append").save()``. The server needs our
jar and kafka-clients: on its class path (``start-connect-server.sh --jars``, or
``spark.jars``), or shipped with the session as artifacts when it has not
(:mod:`.connect_artifacts`: the driver looks the DataSource up through the session's
class loader, the executors fetch the session's jars); :func:`probe` tells whether it can.

What is measured to show where on a Connect server (Spark 4.3), and so how the pieces
travel:

- the write's **options** are in the server's UI (Connect tab) and event log (the
  operation's statement text), whatever their keys: they carry no secret, only the
  prepare's spec (topics, ids, timeout, headers, the repair's partitions) and two names;
- the **producer settings** go as one session setting under
  ``kafka2pc.secret.<random>``, set just before the write and unset after: a session
  setting is in neither place, and Spark redacts its key (default ``spark.redaction.regex``
  matches "secret") where the SQL executions list the session's settings. The driver
  reads it and hands it to the tasks inside their factory only;
- the **results** (one row per written partition, as the Python writer's) come back as
  one session setting ``kafka2pc.results.<random>`` the driver sets when the job commits,
  read here and unset: public API on both sides, no file system shared between this
  client and the cluster.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from ..errors import ConfigurationError
from .alignment import JAR
from .failure import job_message

#: The DataSource's short name (``META-INF/services`` in our jar, ``jvm/build.sh``).
SOURCE = "kafka2pc"
SECRET_PREFIX = "kafka2pc.secret."
RESULTS_PREFIX = "kafka2pc.results."


def probe(spark: Any, kafka_clients: str) -> str:
    """The kafka-clients version the server's driver loads with our DataSource, by a write
    of no row in probe mode (a job of empty tasks, nothing sent to Kafka).

    :raises ConfigurationError: the server cannot load them; names the jars it needs.
    """
    try:
        return server_kafka_clients(spark)
    except Exception as exc:  # DATA_SOURCE_NOT_FOUND, NoClassDefFoundError, ...
        # Broad: any failure of the probe means the server cannot run the JVM writer here;
        # the message carries the first line of what failed, and writer='python' still works.
        raise ConfigurationError(
            f"the Spark Connect server cannot load the kafka2pc DataSource ({job_message(exc)});"
            f" {advice(kafka_clients)}"
        ) from None


def server_kafka_clients(spark: Any) -> str:
    """:func:`probe`'s answer, or the server's own error."""
    with _session_setting(spark, RESULTS_PREFIX, None) as results:
        (
            spark.range(0)
            .write.format(SOURCE)
            .option("probe", "true")
            .option("results_conf", results)
            .mode("append")
            .save()
        )
        answer = spark.conf.get(results)
    return str(json.loads(answer)["kafka_clients"])


def advice(kafka_clients: str) -> str:
    """What to do when a server cannot load the DataSource even from session artifacts."""
    return (
        f"start the server with --jars {JAR},<kafka-clients jar> (or spark.jars; "
        f"--packages {kafka_clients} for kafka-clients), or use writer='python'"
    )


def connect_jvm_write(
    prepared: Any,
    *,
    topics: Sequence[str],
    transactional_ids: Sequence[str],
    settings: Mapping[str, str],
    transaction_timeout_ms: int,
    header_names: Sequence[str],
    selected: Sequence[int] | None,
) -> list[Any]:
    """Run the write job through the DataSource; one result row per written partition
    (:data:`.partition_writer.RESULT_SCHEMA`'s fields), as the classic JVM writer returns."""
    from pyspark.sql import Row

    spark = prepared.sparkSession
    spec = {
        "topics": list(topics),
        "transactional_ids": list(transactional_ids),
        "transaction_timeout_ms": int(transaction_timeout_ms),
        "header_names": list(header_names),
        "selected": None if selected is None else list(selected),
    }
    with (
        _session_setting(spark, SECRET_PREFIX, json.dumps(dict(settings))) as secret,
        _session_setting(spark, RESULTS_PREFIX, None) as results,
    ):
        (
            prepared.write.format(SOURCE)
            .option("spec", json.dumps(spec))
            .option("settings_conf", secret)
            .option("results_conf", results)
            .mode("append")
            .save()
        )
        rows = json.loads(spark.conf.get(results))
    return [Row(**row) for row in rows]


@contextmanager
def _session_setting(spark: Any, prefix: str, value: str | None) -> Iterator[str]:
    """A session setting of a fresh name under ``prefix`` (set to ``value`` unless None),
    unset on leaving."""
    key = f"{prefix}{uuid.uuid4().hex}"
    if value is not None:
        spark.conf.set(key, value)
    try:
        yield key
    finally:
        with suppress(Exception):  # the session is gone: so is the setting
            spark.conf.unset(key)
