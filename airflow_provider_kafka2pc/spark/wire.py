"""What an export puts on the wire beyond bytes: registry Avro, JSON Schema and Protobuf,
tombstones, record timestamps.

Everything here is decided on the driver before any transaction opens and evaluated by
Spark in the JVM: the registry is asked once per export (:mod:`..connection.registry`), a
tombstone is a null value column, a record timestamp a long column
(:data:`~.partition_writer.TIMESTAMP`) the writers pass to ``produce(timestamp=...)``.
A bad option fails here, with nothing written.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..connection.registry import (
    RegisteredSchema,
    RegistryFormat,
    SchemaType,
    resolve,
    subject_name,
)
from ..errors import ConfigurationError
from . import avro, json_schema
from .connect import is_connect
from .connect_artifacts import ensure_avro

#: Starts the error a bad record timestamp raises in the shuffle's map stage.
BAD_TIMESTAMP_MARK = "kafka2pc bad timestamp"
#: Starts the error a null in a field the Avro schema declares non-null raises there.
NULL_FIELD_MARK = "kafka2pc null field"
#: Starts the error a null inside an array or a map raises in the Protobuf encoder
#: (``ProtobufEncode.NULL_MARK``).
PROTOBUF_NULL_MARK = "kafka2pc protobuf null"
_TIMESTAMP_TYPES = (T.TimestampType, T.LongType)


@dataclass(frozen=True)
class WireOptions:
    """The user's wire options for one export.

    :param registry: ``SchemaRegistryClient`` settings (``url``, ``basic.auth.user.info``,
        ``ssl.*``); required with a registry format.
    :param value_format: values as registry Avro (:class:`RegistryFormat`); None: bytes
        (the value column, or the row as JSON).
    :param key_format: keys as registry Avro; None: the key column as text/bytes.
    :param tombstone_when: a SQL boolean expression over the source's columns; where true,
        the record's value is null (a tombstone). A null value column is one too.
    :param timestamp_column: the record's CreateTime: a timestamp column, or a long one of
        epoch milliseconds; null: the time of writing.
    """

    registry: Mapping[str, Any] | None = field(default=None, repr=False)
    value_format: RegistryFormat | None = None
    key_format: RegistryFormat | None = None
    tombstone_when: str | None = None
    timestamp_column: str | None = None

    def __post_init__(self) -> None:
        if (self.value_format or self.key_format) and not self.registry:
            raise ConfigurationError(
                "a registry value/key format needs the schema registry's settings (its url): "
                "registry_conn_id for the export's tasks, --registry-config-file for the "
                "application, registry= for prepare_in_job"
            )

    @property
    def uses_registry(self) -> bool:
        return self.value_format is not None or self.key_format is not None


@dataclass(frozen=True)
class Schemas:
    """The registry's answers for one export: what to encode values and keys with."""

    value: RegisteredSchema | None = None
    key: RegisteredSchema | None = None


def field_type(df: DataFrame, name: str, role: str) -> T.DataType:
    fields = {f.name: f.dataType for f in df.schema.fields}
    if name not in fields:
        raise ConfigurationError(
            f"{role} column {name!r} is not in the DataFrame (columns: {sorted(fields)})"
        )
    return fields[name]


def value_input(df: DataFrame, value_column: str | None) -> tuple[Column, T.DataType]:
    """What a registry value encodes: the value column, else the whole row as a record."""
    if value_column is not None:
        return F.col(value_column), field_type(df, value_column, "value")
    return F.struct(*[F.col(c) for c in df.columns]), df.schema


def resolve_schemas(
    df: DataFrame,
    topic: str,
    options: WireOptions,
    key_column: str | None,
    value_column: str | None,
) -> Schemas:
    """Check the columns against each schema, then ask the registry once per schema."""
    if not options.uses_registry:
        return Schemas()
    spark = df.sparkSession
    registry = dict(options.registry or {})
    wanted: dict[str, tuple[RegistryFormat, T.DataType]] = {}
    if options.value_format is not None:
        wanted["value"] = (options.value_format, value_input(df, value_column)[1])
    if options.key_format is not None:
        if key_column is None:
            raise ConfigurationError("key_format needs a key_column")
        wanted["key"] = (options.key_format, field_type(df, key_column, "key"))
    schemas: dict[str, str] = {}
    messages: dict[str, Any] = {}  # role: protobuf.ProtoSchema
    for role, (fmt, data_type) in wanted.items():
        if fmt.schema_type == SchemaType.PROTOBUF:
            messages[role] = _protobuf_schema(spark, fmt, data_type, role)
            schema = messages[role].registered
        elif fmt.schema_type == SchemaType.JSON:
            # Titled by the full name, as Avro and Protobuf are named: a record strategy's
            # subject is then ``namespace.record_name`` in all three formats.
            title = f"{fmt.namespace}.{fmt.record_name}" if fmt.namespace else fmt.record_name
            schema = fmt.schema or json_schema.derive_schema(data_type, title)
            json_schema.check_encodable(data_type, schema, role)
        else:
            if is_connect(spark):  # a plain server has no spark-avro: shipped with the session
                ensure_avro(spark)
            schema = fmt.schema or avro.derive_schema(
                spark, data_type, fmt.record_name, fmt.namespace
            )
            avro.check_encodable(spark, data_type, schema, role)
        schemas[role] = schema
    found = {
        role: resolve(
            registry,
            subject_name(
                fmt.subject_name_strategy,
                topic,
                schemas[role],
                is_key=role == "key",
                schema_type=fmt.schema_type,
                full_name=messages[role].message if role in messages else None,
            ),
            schemas[role],
            auto_register=fmt.auto_register,
            schema_type=fmt.schema_type,
        )
        for role, (fmt, _) in wanted.items()
    }
    for role, message in messages.items():  # the header names the message in the file
        found[role] = replace(
            found[role],
            message=message.message,
            message_indexes=_protobuf().message_indexes(message.indexes),
        )
    return Schemas(value=found.get("value"), key=found.get("key"))


def _protobuf_schema(
    spark: SparkSession, fmt: RegistryFormat, data_type: T.DataType, role: str
) -> Any:
    """The compiled schema (``protobuf.ProtoSchema``: given, or derived from the columns),
    checked against them; the session made able to encode it (protobuf-java and the
    project's jar)."""
    protobuf = _protobuf()
    text = fmt.schema or protobuf.derive_schema(data_type, fmt.record_name, fmt.namespace)
    compiled = protobuf.compile_schema(text, fmt.record_name)
    protobuf.check_encodable(data_type, compiled, role)
    protobuf.register_encoder(spark)
    return compiled


def registry_value(df: DataFrame, value_column: str | None, schema: RegisteredSchema) -> Column:
    """The encoded value; a null in a field the schema declares non-null fails the
    shuffle's map stage (:data:`NULL_FIELD_MARK`), before any writing task starts."""
    column, data_type = value_input(df, value_column)
    if schema.schema_type == SchemaType.PROTOBUF:
        return _protobuf().encode(column, _compiled(schema), schema.header)
    if schema.schema_type == SchemaType.JSON:
        value = json_schema.encode(column, schema.header)
        guarded = json_schema.check_encodable(data_type, schema.schema, "value")
    else:
        value = avro.encode(column, schema.schema, schema.header)
        guarded = avro.non_null_fields(data_type, schema.schema)
    for name in guarded:
        field_value = F.col(name) if value_column is None else F.col(value_column)[name]
        value = F.when(
            field_value.isNull(),
            F.raise_error(
                F.lit(
                    f"{NULL_FIELD_MARK}: column {name!r} is null in some rows but the "
                    "schema does not allow it (filter or fill the nulls, or make the field "
                    "nullable: an Avro union with null, not required in a JSON Schema)"
                )
            ),
        ).otherwise(value)
    return value


def registry_key(key_column: str, schema: RegisteredSchema) -> Column:
    if schema.schema_type == SchemaType.PROTOBUF:
        return _protobuf().encode(F.col(key_column), _compiled(schema), schema.header)
    if schema.schema_type == SchemaType.JSON:
        return json_schema.encode(F.col(key_column), schema.header)
    return avro.encode(F.col(key_column), schema.schema, schema.header)


def _compiled(schema: RegisteredSchema) -> Any:
    """The registered Protobuf schema (a base64 file descriptor) and its message again."""
    return _protobuf().ProtoSchema(
        base64.standard_b64decode(schema.schema), str(schema.message), ()
    )


def tombstone_condition(df: DataFrame, condition: str, key_column: str | None) -> Column:
    """``condition`` as a boolean column; a clear error when it is not one."""
    if key_column is None:
        raise ConfigurationError(
            "tombstone_when needs a key_column: a tombstone deletes its key, and a record "
            "without a key deletes nothing (a compacted topic refuses it)"
        )
    try:
        data_type = df.select(F.expr(condition).alias("c")).schema["c"].dataType
    except AnalysisException as exc:  # and ParseException, classic or Connect
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigurationError(
            f"tombstone_when {condition!r} is not a SQL expression over the source's "
            f"columns: {first}"
        ) from None
    if not isinstance(data_type, T.BooleanType):
        raise ConfigurationError(
            f"tombstone_when {condition!r} is {data_type.simpleString()}, not boolean"
        )
    return F.coalesce(F.expr(condition), F.lit(False))


def timestamp_value(df: DataFrame, name: str) -> Column:
    """The record timestamp column as epoch ms (long). Null: the time of writing. A value
    before 1970-01-01 (or at it: librdkafka reads 0 as "now") fails the shuffle's map stage,
    before any writing task starts, with :data:`BAD_TIMESTAMP_MARK`."""
    data_type = field_type(df, name, "timestamp")
    if not isinstance(data_type, _TIMESTAMP_TYPES):
        raise ConfigurationError(
            f"timestamp column {name!r} has type {data_type.simpleString()}; use a timestamp "
            "column or a long column of epoch milliseconds (a timestamp_ntz has no time "
            "zone: convert it with to_utc_timestamp first)"
        )
    millis = F.unix_millis(F.col(name)) if isinstance(data_type, T.TimestampType) else F.col(name)
    return F.when(
        millis <= 0,
        F.raise_error(
            F.concat(
                F.lit(f"{BAD_TIMESTAMP_MARK}: timestamp column {name!r} holds "),
                millis.cast("string"),
                F.lit(" (epoch ms); record timestamps must be after 1970-01-01T00:00:00Z"),
            )
        ),
    ).otherwise(millis)


def bad_timestamp_refusal(exc: Exception) -> ConfigurationError | None:
    """The error to raise when ``exc`` is a bad record timestamp, a null where the
    Avro schema allows none (or in a Protobuf array or map), or (on Spark Connect) a column
    the Avro schema cannot carry, found in the shuffle's map stage."""
    text = str(exc)
    for mark in (BAD_TIMESTAMP_MARK, NULL_FIELD_MARK, PROTOBUF_NULL_MARK):
        at = text.find(mark)
        if at >= 0:
            said = text[at + len(mark) :].splitlines()[0].lstrip(": ")
            # Spark appends the raise_error's SQL state to the message: not the user's words.
            said = re.sub(r"\s*SQLSTATE: \w+\s*$", "", said)
            return ConfigurationError(f"{said}; nothing was written")
    return avro.incompatible_refusal(exc)


def _protobuf() -> Any:
    """:mod:`.protobuf`, imported where a Protobuf format is used: it needs Python's
    ``protobuf`` (the ``registry`` extra), which the other formats do not."""
    try:
        from . import protobuf
    except ImportError as exc:
        raise ConfigurationError(
            f"registry Protobuf needs Python's protobuf package ({exc}): pip install "
            "'airflow-provider-kafka2pc[registry]'"
        ) from None
    return protobuf
