"""Avro in the schema registry's wire format, encoded by Spark in the JVM.

Spark's ``to_avro`` (the ``spark-avro`` package) writes raw Avro; the registry's wire format
puts a 5-byte header (magic 0, schema id) before it. The header is the same for every record
of an export, so it is a literal: ``concat(lit(header), to_avro(struct, schema))``, one
expression the JVM evaluates; Python never touches a record.

The schema comes from the DataFrame (Spark's own ``SchemaConverters``, what ``to_avro``
would derive) or from the user; either way the driver checks, before the registry is asked
and before anything opens, that the columns can be written with it (Spark's
``AvroSerializer`` refuses a column the schema cannot carry, naming it).
"""

from __future__ import annotations

import json

from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import ConfigurationError
from . import AVRO_PACKAGE

_CONVERTERS = "org.apache.spark.sql.avro.SchemaConverters"
_SERIALIZER = "org.apache.spark.sql.avro.AvroSerializer"


def _jvm_class(spark: SparkSession, name: str) -> object:
    """The JVM class ``name``, or a clear error naming the package that provides it."""
    jvm = spark.sparkContext._jvm
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        return jvm.java.lang.Class.forName(name, True, loader)
    except Py4JJavaError:  # ClassNotFoundException
        raise ConfigurationError(
            f"Spark's Avro support is not on this session's classpath ({name}); start Spark "
            f"with --packages {AVRO_PACKAGE} (spark.jars.packages); nothing was written"
        ) from None


def _java_type(spark: SparkSession, data_type: T.DataType) -> object:
    return spark._jsparkSession.parseDataType(data_type.json())


def derive_schema(
    spark: SparkSession, data_type: T.DataType, record_name: str, namespace: str = ""
) -> str:
    """The Avro schema Spark writes ``data_type`` with (non-null at the top: a null value is
    a tombstone, not an Avro null)."""
    _jvm_class(spark, _CONVERTERS)
    converters = spark.sparkContext._jvm.org.apache.spark.sql.avro.SchemaConverters
    try:
        schema = converters.toAvroType(_java_type(spark, data_type), False, record_name, namespace)
    except Py4JJavaError as exc:  # IncompatibleSchemaException
        raise ConfigurationError(
            f"the columns cannot be written as Avro: {_java_message(exc)}; nothing was written"
        ) from None
    return str(schema.toString())


def check_encodable(spark: SparkSession, data_type: T.DataType, schema: str, role: str) -> None:
    """Refuse, before anything opens, a column ``schema`` cannot carry (name, type or
    nullability): Spark's ``AvroSerializer`` checks the pair when it is built."""
    _jvm_class(spark, _SERIALIZER)
    jvm = spark.sparkContext._jvm
    try:
        avro_schema = jvm.org.apache.avro.Schema.Parser().parse(schema)
        jvm.org.apache.spark.sql.avro.AvroSerializer(
            _java_type(spark, data_type), avro_schema, False
        )
    except Py4JJavaError as exc:  # SchemaParseException, IncompatibleSchemaException
        raise ConfigurationError(
            f"the {role} columns cannot be written with the Avro schema: {_java_message(exc)}; "
            "nothing was written"
        ) from None


def non_null_fields(data_type: T.DataType, schema: str) -> list[str]:
    """Top-level fields nullable in Spark whose Avro field has no ``null`` branch.

    Spark's ``AvroSerializer`` only warns about such a pair and fails on the first null, in
    a writing task: the caller guards them in the shuffle's map stage instead.
    """
    if not isinstance(data_type, T.StructType):
        return []
    parsed = json.loads(schema)
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        return []
    avro = {f.get("name"): f.get("type") for f in parsed.get("fields", [])}

    def allows_null(avro_type: object) -> bool:
        if isinstance(avro_type, list):
            return any(allows_null(t) for t in avro_type)
        if isinstance(avro_type, dict):
            return avro_type.get("type") == "null"
        return avro_type == "null"

    return [
        f.name
        for f in data_type.fields
        if f.nullable and f.name in avro and not allows_null(avro[f.name])
    ]


def encode(column: Column, schema: str, header: bytes) -> Column:
    """``column`` as the registry's wire format: ``header`` + Avro of ``schema``; null
    stays null (a tombstone)."""
    from pyspark.sql.avro.functions import to_avro

    return F.concat(F.lit(header), to_avro(column, schema))


def _java_message(exc: Exception) -> str:
    """The Java exception's own message, without the Py4J stack trace."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            cause = java
            while cause.getCause() is not None:
                cause = cause.getCause()
            return f"{java.getClass().getSimpleName()}: {java.getMessage()}" + (
                f" ({cause.getMessage()})" if cause is not java else ""
            )
        except Py4JError:  # the JVM cannot be asked any more: the Python side's text
            pass
    return str(exc).splitlines()[0][:500]
