"""Spark for the tests: an in-process session, spark-submit, and a standalone cluster.

Every Spark process is started here and stopped by its own PID. The standalone cluster
(:func:`standalone_cluster`) lives in ``devtools/spark_standalone.py``, shared with the
cluster benchmark.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from airflow_provider_kafka2pc import defaults
from airflow_provider_kafka2pc.spark import PROTOBUF_JAVA
from airflow_provider_kafka2pc.spark.maven import fetch_jar
from devtools.spark_standalone import PYTHON_ENV, standalone_cluster
from devtools.spark_submit import LOCAL_CONF

__all__ = ["PYTHON_ENV", "QUIET_CONF", "local_session", "standalone_cluster"]
#: protobuf-java on the driver's class path of every in-process session: one test process
#: starts one JVM for all its modules, and a module that loaded the project's jar first would
#: leave the Protobuf encoder unable to see a protobuf-java added later by ``ADD JAR`` (a
#: child class loader). A user's session needs the same: docs/wire-formats.md.
QUIET_CONF = {
    **defaults.spark_conf(LOCAL_CONF),
    "spark.driver.extraClassPath": str(fetch_jar(PROTOBUF_JAVA)),
}


def local_session() -> Iterator[object]:
    """A ``local[2]`` SparkSession with the tests' quiet settings, stopped after use: the
    body of the module-scoped ``spark`` fixtures (``yield from local_session()``)."""
    from pyspark.sql import SparkSession

    os.environ.update(PYTHON_ENV)
    builder = SparkSession.builder.master("local[2]")
    for key, value in QUIET_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    yield session
    session.stop()
