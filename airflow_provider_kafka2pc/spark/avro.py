"""Avro in the schema registry's wire format, encoded by Spark in the JVM.

Spark's ``to_avro`` (the ``spark-avro`` package) writes raw Avro; the registry's wire format
puts a 5-byte header (magic 0, schema id) before it. The header is the same for every record
of an export, so it is a literal: ``concat(lit(header), to_avro(struct, schema))``, one
expression the JVM evaluates; Python never touches a record.

The schema comes from the DataFrame (Spark's own ``SchemaConverters``, what ``to_avro``
would derive) or from the user; either way the driver checks, before the registry is asked
and before anything opens, that the columns can be written with it (Spark's
``AvroSerializer`` refuses a column the schema cannot carry, naming it).

A Spark Connect client has no py4j into the server's JVM: there the schema is derived by
:func:`avro_schema`, ``SchemaConverters.toAvroType`` ported to Python (a unit test compares
the two on a table of types), and a given schema is only parsed here; the server's
``AvroSerializer`` refuses a column it cannot carry in the shuffle's map stage, before any
writing task starts, and :func:`incompatible_refusal` turns that into the same clear error.
"""

from __future__ import annotations

import json
import math
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import ConfigurationError
from . import AVRO_PACKAGE
from .connect import is_connect
from .failure import job_message

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
    if is_connect(spark):
        return avro_schema(data_type, record_name, namespace)
    _jvm_class(spark, _CONVERTERS)
    converters = spark.sparkContext._jvm.org.apache.spark.sql.avro.SchemaConverters
    try:
        schema = converters.toAvroType(_java_type(spark, data_type), False, record_name, namespace)
    except Py4JJavaError as exc:  # IncompatibleSchemaException
        raise ConfigurationError(
            f"the columns cannot be written as Avro: {job_message(exc)}; nothing was written"
        ) from None
    return str(schema.toString())


def check_encodable(spark: SparkSession, data_type: T.DataType, schema: str, role: str) -> None:
    """Refuse, before anything opens, a column ``schema`` cannot carry (name, type or
    nullability): Spark's ``AvroSerializer`` checks the pair when it is built. On Spark
    Connect the schema is only parsed: the server checks the pair in the map stage."""
    if is_connect(spark):
        _parse(schema, role)
        return
    _jvm_class(spark, _SERIALIZER)
    jvm = spark.sparkContext._jvm
    try:
        avro_schema = jvm.org.apache.avro.Schema.Parser().parse(schema)
        jvm.org.apache.spark.sql.avro.AvroSerializer(
            _java_type(spark, data_type), avro_schema, False
        )
    except Py4JJavaError as exc:  # SchemaParseException, IncompatibleSchemaException
        raise ConfigurationError(
            f"the {role} columns cannot be written with the Avro schema: {job_message(exc)}; "
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


#: The Avro property Spark marks an interval's Catalyst type with.
CATALYST_TYPE_PROP = "spark.sql.catalyst.type"
#: Starts the message of the error Spark's ``AvroSerializer`` raises for a column the
#: schema cannot carry.
INCOMPATIBLE = "IncompatibleSchemaException: "


def avro_schema(data_type: T.DataType, record_name: str, namespace: str = "") -> str:
    """The Avro schema Spark's ``SchemaConverters.toAvroType(data_type, false, record_name,
    namespace)`` gives, as Avro's ``Schema.toString`` writes it (compact JSON, a named type's
    namespace only where it differs from the enclosing one)."""
    return json.dumps(
        _Converter().convert(data_type, False, record_name, namespace, None),
        separators=(",", ":"),
        ensure_ascii=False,
    )


class _Converter:
    """One conversion: the named types it wrote, which Avro may not define twice."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def convert(
        self, data_type: T.DataType, nullable: bool, record: str, namespace: str, space: str | None
    ) -> Any:
        """The type's JSON; ``space`` is the enclosing namespace (None at the top)."""
        schema = self._type(data_type, record, namespace, space)
        if nullable and not isinstance(data_type, T.NullType):
            return [schema, "null"]
        return schema

    def _type(self, data_type: T.DataType, record: str, namespace: str, space: str | None) -> Any:
        primitive = _primitive(data_type)
        if primitive is not None:
            return primitive
        if isinstance(data_type, T.DecimalType):
            prefix = f"{namespace}.{record}" if namespace else record
            fixed = self._named("fixed", f"{prefix}.fixed", space)
            return {
                **fixed,
                "size": _min_bytes(data_type.precision),
                "logicalType": "decimal",
                "precision": data_type.precision,
                "scale": data_type.scale,
            }
        if isinstance(data_type, T.ArrayType):
            items = self.convert(
                data_type.elementType, data_type.containsNull, record, namespace, space
            )
            return {"type": "array", "items": items}
        if isinstance(data_type, T.MapType) and _is_string(data_type.keyType):
            values = self.convert(
                data_type.valueType, data_type.valueContainsNull, record, namespace, space
            )
            return {"type": "map", "values": values}
        if isinstance(data_type, T.StructType):
            return self._record(data_type, record, namespace, space)
        raise ConfigurationError(
            f"the columns cannot be written as Avro: {INCOMPATIBLE}Unexpected type "
            f"{data_type.simpleString()}; nothing was written"
        )

    def _record(
        self, data_type: T.StructType, record: str, namespace: str, space: str | None
    ) -> dict[str, Any]:
        full = f"{namespace}.{record}" if namespace else record
        written = self._named("record", full, space)
        own_space = full.rpartition(".")[0] or None  # the fields' enclosing namespace
        seen: set[str] = set()
        fields = []
        for f in data_type.fields:
            _check_name(f.name)
            if f.name in seen:
                raise ConfigurationError(
                    f"the columns cannot be written as Avro: duplicate field {f.name!r} in "
                    f"record {record!r}; nothing was written"
                )
            seen.add(f.name)
            avro = self.convert(f.dataType, f.nullable, f.name, full, own_space)
            fields.append({"name": f.name, "type": avro})
        return {**written, "fields": fields}

    def _named(self, kind: str, full: str, space: str | None) -> dict[str, Any]:
        """``type``, ``name`` and (where it differs from ``space``) ``namespace`` of a named
        type, as Avro's ``Name`` parses ``full`` (a name after its last dot)."""
        own_space, _, name = full.rpartition(".")
        _check_name(name)
        if full in self.names:
            raise ConfigurationError(
                f"the columns cannot be written as Avro: SchemaParseException: Can't redefine: "
                f"{full}; nothing was written"
            )
        self.names.add(full)
        written: dict[str, Any] = {"type": kind, "name": name}
        if own_space and own_space != space:
            written["namespace"] = own_space
        elif not own_space and space is not None:
            written["namespace"] = ""
        return written


def _primitive(data_type: T.DataType) -> Any:
    """The JSON of a type without a name, or None."""
    if isinstance(data_type, T.BooleanType):
        return "boolean"
    if isinstance(data_type, T.ByteType | T.ShortType | T.IntegerType):
        return "int"
    if isinstance(data_type, T.LongType):
        return "long"
    if isinstance(data_type, T.DateType):
        return {"type": "int", "logicalType": "date"}
    if isinstance(data_type, T.TimestampType):
        return {"type": "long", "logicalType": "timestamp-micros"}
    if isinstance(data_type, T.TimestampNTZType):
        return {"type": "long", "logicalType": "local-timestamp-micros"}
    if isinstance(data_type, T.FloatType):
        return "float"
    if isinstance(data_type, T.DoubleType):
        return "double"
    if _is_string(data_type):
        return "string"
    if isinstance(data_type, T.NullType):
        return "null"
    if isinstance(data_type, T.BinaryType):
        return "bytes"
    if isinstance(data_type, T.YearMonthIntervalType):
        return {"type": "int", CATALYST_TYPE_PROP: data_type.simpleString()}
    if isinstance(data_type, T.DayTimeIntervalType):
        return {"type": "long", CATALYST_TYPE_PROP: data_type.simpleString()}
    return None


def _is_string(data_type: T.DataType) -> bool:
    """Spark's own ``StringType`` (a collated string is another type to SchemaConverters)."""
    return isinstance(data_type, T.StringType) and getattr(
        data_type, "collation", "UTF8_BINARY"
    ) in ("UTF8_BINARY", None)


def _min_bytes(precision: int) -> int:
    """Spark's ``Decimal.minBytesForPrecision``."""
    size = 1
    while math.pow(2.0, 8 * size - 1) < math.pow(10.0, precision):
        size += 1
    return size


def _check_name(name: str) -> None:
    """Avro's name rule (``NameValidator.UTF_VALIDATOR``): a letter or ``_``, then letters,
    digits or ``_``."""
    if not name:
        problem = "Empty name"
    elif not (name[0].isalpha() or name[0] == "_"):
        problem = f"Illegal initial character: {name}"
    elif not all(c.isalnum() or c == "_" for c in name[1:]):
        problem = f"Illegal character in: {name}"
    else:
        return
    raise ConfigurationError(
        f"the columns cannot be written as Avro: SchemaParseException: {problem}; "
        "nothing was written"
    )


def _parse(schema: str, role: str) -> None:
    """A given schema parsed as Avro (fastavro, with the registry's extra), else as JSON."""
    try:
        parsed = json.loads(schema)
    except ValueError as exc:
        raise ConfigurationError(
            f"the {role} Avro schema is not JSON ({exc}); nothing was written"
        ) from None
    try:
        from fastavro import parse_schema
    except ImportError:  # the registry's client comes with it: only without that extra
        return
    try:
        parse_schema(parsed)
    except Exception as exc:  # SchemaParseException, UnknownType, ...
        raise ConfigurationError(
            f"the {role} Avro schema does not parse ({type(exc).__name__}: {exc}); "
            "nothing was written"
        ) from None


def incompatible_refusal(exc: Exception) -> ConfigurationError | None:
    """The clear error for ``exc`` when it is Spark's ``AvroSerializer`` refusing a column
    the schema cannot carry, in the shuffle's map stage (on Spark Connect, where the driver
    cannot check the pair first); else None."""
    text = str(exc)
    at = text.find(INCOMPATIBLE)
    if at < 0:
        return None
    said = text[at + len(INCOMPATIBLE) :].splitlines()[0].strip()
    return ConfigurationError(
        f"the columns cannot be written with the Avro schema: {said}; nothing was written"
    )
