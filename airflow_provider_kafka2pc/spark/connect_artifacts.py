"""Jars a plain Spark Connect server lacks, shipped with the session as artifacts.

A server started without ``--jars`` (PySpark's ``start-connect-server.sh`` as it is) has
neither our jar, nor kafka-clients, nor Spark's spark-avro. ``spark.addArtifacts(jar)``
uploads a jar to the session: the server puts it on the session's class loader, through
which the driver looks up a DataSource (``df.write.format("kafka2pc")``) and resolves
``to_avro``, and the executors fetch the session's jars with its tasks. Measured on PySpark
4.3 (tests/airflow/test_connect_artifacts.py): the JVM writer and registry Avro run on a
plain server this way, on the driver and in the executors.

Each jar is sent once per session (remembered here per session), and only after a cheap
check found the server without it: a server started with the jars loads them from its own
class path, where its JVM keeps them compiled from one session to the next; a session's
jars are loaded again by each new session's class loader.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import errors
from . import AVRO_PACKAGE
from .alignment import JAR
from .connect_jvm import advice, server_kafka_clients
from .failure import job_message
from .maven import fetch_jar

log = logging.getLogger(__name__)

#: The jars each live session got from here, by name.
_SHIPPED: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def ship_jars(spark: Any, jars: Sequence[Path]) -> list[Path]:
    """Upload to ``spark``'s session those of ``jars`` it did not get yet; the ones sent."""
    done = _SHIPPED.setdefault(spark, set())
    new = [jar for jar in jars if jar.name not in done]
    if new:
        log.info("shipping %s to the Spark Connect session", ", ".join(j.name for j in new))
        spark.addArtifacts(*(str(jar) for jar in new))
        done.update(jar.name for jar in new)
    return new


def shipped(spark: Any) -> frozenset[str]:
    """The jars' names shipped to ``spark``'s session from here."""
    return frozenset(_SHIPPED.get(spark, ()))


def spark_avro_jar() -> Path:
    """Spark's spark-avro (:data:`.AVRO_PACKAGE`), fetched once into kafka2pc's cache."""
    return fetch_jar(AVRO_PACKAGE)


def ensure_loaded(
    spark: Any,
    check: Callable[[], Any],
    jars: Callable[[], Sequence[Path]],
    what: str,
    advice: str,
) -> Any:
    """``check()``'s answer; when it fails, ``jars()`` shipped to the session and
    ``check()`` again.

    :raises ConfigurationError: ``check()`` fails with the jars shipped; names ``what``,
        the server's words and ``advice``.
    """
    try:
        return check()
    except Exception as exc:  # DATA_SOURCE_NOT_FOUND, AVRO_NOT_LOADED_..., ...
        log.info("the Spark Connect server lacks %s (%s)", what, job_message(exc))
    wanted = list(jars())
    ship_jars(spark, wanted)
    try:
        return check()
    except Exception as exc:  # as above: whatever still fails is named, with what was shipped
        names = ", ".join(jar.name for jar in wanted)
        raise errors.ConfigurationError(
            f"the Spark Connect server cannot load {what} ({job_message(exc)}), even with "
            f"{names} shipped as session artifacts; {advice}"
        ) from None


def ensure_jvm_writer(spark: Any, kafka_clients: str, kafka_clients_jar: Callable[[], Path]) -> str:
    """The kafka-clients version the server loads with our DataSource: our jar and
    kafka-clients (``kafka_clients_jar()``) shipped to the session when it lacks them.

    :raises ConfigurationError: the server cannot load them even so.
    :raises BrokerFetchError: kafka-clients could not be fetched.
    """
    return str(
        ensure_loaded(
            spark,
            lambda: server_kafka_clients(spark),
            lambda: [kafka_clients_jar(), JAR],
            "the kafka2pc DataSource",
            advice(kafka_clients),
        )
    )


def ensure_avro(spark: Any) -> None:
    """Make ``to_avro`` resolve on ``spark``'s server: spark-avro shipped when missing.

    :raises ConfigurationError: the server cannot load it.
    """
    ensure_loaded(
        spark,
        lambda: _avro_check(spark),
        lambda: [spark_avro_jar()],
        "Spark's Avro support",
        f"start it with --packages {AVRO_PACKAGE}; nothing was written",
    )


def _avro_check(spark: Any) -> None:
    """An analysis (no job): the server resolves ``to_avro``, or says it cannot."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import to_avro

    spark.range(0).select(to_avro(F.lit(0), '"int"')).schema  # noqa: B018
