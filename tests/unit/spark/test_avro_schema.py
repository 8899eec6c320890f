"""The Avro schema derived in Python (for Spark Connect, which has no py4j) is Spark's own.

:func:`~airflow_provider_kafka2pc.spark.avro.avro_schema` ports ``SchemaConverters
.toAvroType``; each type of the table goes through both, the real one through py4j on a
classic local session with Spark's spark-avro (the jar from kafka2pc's cache), and the two
texts must be equal: the registry registers and looks schemas up by their text.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from airflow_provider_kafka2pc.errors import ConfigurationError
from airflow_provider_kafka2pc.spark import avro
from airflow_provider_kafka2pc.spark.connect_artifacts import spark_avro_jar
from tests.support.spark import PYTHON_ENV, QUIET_CONF


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    os.environ.update(PYTHON_ENV)
    jar = spark_avro_jar()
    builder = SparkSession.builder.master("local[1]").config("spark.jars", str(jar))
    for key, value in QUIET_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    try:
        avro._jvm_class(session, avro._CONVERTERS)
    except ConfigurationError:  # another module started this JVM first
        session.sql(f"ADD JAR '{jar}'")
    yield session
    session.stop()


def field(name: str, data_type: T.DataType, nullable: bool = True) -> T.StructField:
    return T.StructField(name, data_type, nullable)


PERSON = T.StructType(
    [
        field("id", T.LongType(), False),
        field("name", T.StringType()),
        field("price", T.DecimalType(10, 2)),
        field("home", T.StructType([field("city", T.StringType()), field("zip", T.IntegerType())])),
    ]
)

TYPES = {
    "primitives": T.StructType(
        [
            field("b", T.BooleanType()),
            field("y", T.ByteType(), False),
            field("s", T.ShortType()),
            field("i", T.IntegerType(), False),
            field("l", T.LongType()),
            field("f", T.FloatType()),
            field("d", T.DoubleType(), False),
            field("t", T.StringType()),
            field("bin", T.BinaryType()),
            field("n", T.NullType()),
        ]
    ),
    "times": T.StructType(
        [
            field("day", T.DateType()),
            field("at", T.TimestampType(), False),
            field("local", T.TimestampNTZType()),
            field("ym", T.YearMonthIntervalType()),
            field("months", T.YearMonthIntervalType(1, 1)),
            field("dt", T.DayTimeIntervalType()),
            field("hours", T.DayTimeIntervalType(1, 2), False),
        ]
    ),
    "decimals": T.StructType(
        [
            field("small", T.DecimalType(1, 0)),
            field("money", T.DecimalType(10, 2), False),
            field("wide", T.DecimalType(38, 18)),
        ]
    ),
    "nested": T.StructType(
        [
            field("person", PERSON, False),
            field("people", T.ArrayType(PERSON, True)),
            field("by_name", T.MapType(T.StringType(), PERSON, False)),
            field("grid", T.ArrayType(T.ArrayType(T.DecimalType(5, 1), False), True)),
            field("tags", T.MapType(T.StringType(), T.ArrayType(T.StringType()), True)),
            field("deep", T.StructType([field("inner", PERSON)])),
        ]
    ),
    "unicode-names": T.StructType([field("名前", T.StringType()), field("_x1", T.IntegerType())]),
    "a-long-column": T.LongType(),
    "a-decimal-column": T.DecimalType(12, 3),
    "an-array-column": T.ArrayType(T.StructType([field("a", T.IntegerType())])),
}


@pytest.mark.parametrize("namespace", ["", "com.example"])
@pytest.mark.parametrize("name", sorted(TYPES))
def test_the_python_schema_is_sparks(spark: SparkSession, name: str, namespace: str) -> None:
    data_type = TYPES[name]
    spark_schema = avro.derive_schema(spark, data_type, "Order", namespace)
    assert avro.avro_schema(data_type, "Order", namespace) == spark_schema


@pytest.mark.parametrize(
    "data_type",
    [
        T.StructType([field("k", T.MapType(T.IntegerType(), T.StringType()))]),
        T.StructType([field("a b", T.StringType())]),
        T.StructType([field("1st", T.StringType())]),
        T.StructType([field("v", T.VariantType())]),
    ],
    ids=["map-of-int-keys", "space-in-name", "digit-first", "variant"],
)
def test_what_spark_refuses_the_python_schema_refuses(
    spark: SparkSession, data_type: T.DataType
) -> None:
    with pytest.raises(ConfigurationError, match="cannot be written as Avro") as classic:
        avro.derive_schema(spark, data_type, "Order", "")
    with pytest.raises(ConfigurationError, match="cannot be written as Avro") as ported:
        avro.avro_schema(data_type, "Order", "")
    # The same exception class (the texts differ: Scala prints the type its own way).
    assert str(ported.value).split(":")[1] == str(classic.value).split(":")[1], (
        classic.value,
        ported.value,
    )
