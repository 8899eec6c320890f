"""Spark prepare phase: every Spark partition becomes one prepared Kafka transaction.

Needs the ``spark`` extra (pyspark, pyarrow). :data:`APPLICATION` is the spark-submit
application's file path, for ``SparkSubmitOperator(application=APPLICATION, ...)``;
importing it does not import pyspark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

APPLICATION = str(Path(__file__).with_name("app.py"))
#: The project's jar (the key hash UDF of alignment), built by ``jvm/build.sh``.
PROJECT_JAR = str(Path(__file__).with_name("jars") / "kafka2pc-spark.jar")
#: Spark's Avro package (``to_avro``) on Maven Central, for registry Avro values/keys.
#: 4.3.0 is not served there (Nov 2026); 4.2.0 runs under pyspark 4.3.0
#: (tests/integration/test_wire_formats.py proves it here).
AVRO_PACKAGE = "org.apache.spark:spark-avro_2.13:4.2.0"
#: protobuf-java on Maven Central, for registry Protobuf values/keys (the project's
#: ``ProtobufEncode`` builds ``DynamicMessage``\ s with it; Spark's spark-protobuf is not served).
PROTOBUF_JAVA = "com.google.protobuf:protobuf-java:4.36.2"

__all__ = [
    "APPLICATION",
    "AVRO_PACKAGE",
    "PROJECT_JAR",
    "PROTOBUF_JAVA",
    "ExportSpec",
    "PrepareError",
    "Repair",
    "prepare_dataframe",
    "prepare_export",
]


def __getattr__(name: str) -> Any:
    if name == "PrepareError":
        from ..errors import PrepareError

        return PrepareError
    if name == "ExportSpec":
        from .export_spec import ExportSpec

        return ExportSpec
    if name in ("prepare_dataframe", "prepare_export", "Repair"):
        from . import prepare

        return getattr(prepare, name)
    raise AttributeError(name)
