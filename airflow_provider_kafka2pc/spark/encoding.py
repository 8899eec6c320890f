"""The encoded input both writers read: key, value, headers (and timestamp, topic) as columns
computed by Spark, partitioned so that a recomputed partition holds the same records.

Why a module of its own: the same encoding serves the prepare, its loss repair and the
benchmarks' step-by-step runs, and the errors a job raises for bad input (a null required
key, a row naming an undeclared topic) are marked here and named back on the driver
(:func:`job_refusal`), so the marks and their readers stay together.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import ConfigurationError
from ..transaction.routing import Routing
from .alignment import Alignment
from .partition_writer import HEADER_PREFIX, KEY, TIMESTAMP, TOPIC, VALUE
from .wire import (
    Schemas,
    WireOptions,
    bad_timestamp_refusal,
    registry_key,
    registry_value,
    resolve_schemas,
    timestamp_value,
    tombstone_condition,
)

_ATOMIC_KEY_TYPES = (
    T.StringType,
    T.BinaryType,
    T.IntegralType,
    T.DecimalType,
    T.FloatType,
    T.DoubleType,
    T.BooleanType,
    T.DateType,
    T.TimestampType,
    T.TimestampNTZType,
)
_TEXT_TYPES = (T.StringType, T.BinaryType)
_BINARY = T.BinaryType()
_PARTITION_BY = "__kafka2pc_partition_by"
#: Starts the error a null required key raises inside the job, so the driver can name it.
NULL_KEY_MARK = "kafka2pc null key"
#: Starts the error a row naming no declared topic raises inside the job.
UNKNOWN_TOPIC_MARK = "kafka2pc unknown topic"


def job_refusal(
    exc: Exception, key_column: str | None, route: Routing | None
) -> ConfigurationError | None:
    """The clear error for a job refused by its input (a null required key, a row naming
    an undeclared topic, a bad timestamp), else None."""
    return (
        _null_key_refusal(exc, key_column)
        or _unknown_topic_refusal(exc, route)
        or bad_timestamp_refusal(exc)
    )


def _unknown_topic_refusal(exc: Exception, route: Routing | None) -> ConfigurationError | None:
    """The error to raise when ``exc`` is a row naming a topic outside the declared ones."""
    text = str(exc)
    at = text.find(UNKNOWN_TOPIC_MARK)
    if at < 0 or route is None:
        return None
    named = text[at + len(UNKNOWN_TOPIC_MARK) :].lstrip(": ").split("\n")[0].split()[0:1]
    return ConfigurationError(
        f"topic column {route.column!r} names topic {named[0] if named else '?'} in some rows, "
        f"not among topics={list(route.topics)} (declare it, or filter those rows out; a "
        "null is refused too); nothing was written"
    )


def _null_key_refusal(exc: Exception, key_column: str | None) -> ConfigurationError | None:
    """The error to raise when ``exc`` is a required key found null in the map stage."""
    if NULL_KEY_MARK not in str(exc):
        return None
    return ConfigurationError(
        f"key column {key_column!r} is null in some rows; keys are required (filter them "
        "out, or pass require_keys=False); nothing was written"
    )


def partitioned_input(
    df: DataFrame,
    partitions: int,
    key_column: str | None = None,
    value_column: str | None = None,
    header_columns: Sequence[str] = (),
    *,
    require_keys: bool = False,
    alignment: Alignment | None = None,
    wire: WireOptions | None = None,
    schemas: Schemas | None = None,
    source_splits: bool = False,
    route: Routing | None = None,
    text_values: bool = False,
) -> DataFrame:
    """``df`` as the writers see it: binary key/value/header columns in ``partitions``.

    Membership survives recomputation: hash partitioning of the binary key (or of the
    row's JSON) is a pure function of the row, unlike round-robin; so is ``alignment``'s
    owner of the key's Kafka partition (a null key falls back to the row's hash). With
    ``require_keys``, a null key fails the job in the shuffle's map stage (message
    :data:`NULL_KEY_MARK`). With ``source_splits``, no shuffle: ``df``'s own partitions,
    coalesced to at most ``partitions`` (:mod:`.source_splits`); a null key then fails the
    writing task. With ``text_values`` (the JVM writer) a text value stays a string column:
    the writer takes its UTF-8 bytes, one copy fewer per record than a cast to binary.
    """
    encoded = encode_columns(
        df,
        key_column,
        value_column,
        header_columns,
        require_keys,
        wire=wire,
        schemas=schemas,
        route=route,
        text_values=text_values,
    )
    if source_splits:
        return df.select(*encoded).coalesce(partitions)
    row_hash = F.to_json(F.struct(*[F.col(c) for c in df.columns]))
    by = F.col(KEY) if key_column else row_hash
    if alignment is not None and key_column is not None:
        owner = alignment.owner_column(F.col(KEY))
        by = F.when(F.col(KEY).isNull(), F.hash(row_hash)).otherwise(owner)
    return (
        df.select(*encoded, by.alias(_PARTITION_BY))
        .repartition(partitions, F.col(_PARTITION_BY))
        .drop(_PARTITION_BY)
    )


def encode_columns(
    df: DataFrame,
    key_column: str | None,
    value_column: str | None,
    header_columns: Sequence[str],
    require_keys: bool = False,
    *,
    wire: WireOptions | None = None,
    schemas: Schemas | None = None,
    route: Routing | None = None,
    text_values: bool = False,
) -> list[Column]:
    """Key, value and header columns as binary, computed by Spark (not per row in Python);
    with ``wire``, the record timestamp too, and a null value where a tombstone is asked.
    Registry formats are encoded once ``schemas`` holds the registry's answers. With
    ``text_values``, a text value (the row's JSON, a string column) stays a string."""
    wire = wire or WireOptions()
    schemas = schemas or Schemas()
    fields = {f.name: f.dataType for f in df.schema.fields}

    def field(name: str, role: str) -> T.DataType:
        if name not in fields:
            raise ConfigurationError(
                f"{role} column {name!r} is not in the DataFrame (columns: {sorted(fields)})"
            )
        return fields[name]

    if key_column is None:
        key = F.lit(None).cast(_BINARY)
    else:
        key_type = field(key_column, "key")
        if wire.key_format is not None:
            pass  # any type: Avro carries it
        elif not isinstance(key_type, _ATOMIC_KEY_TYPES):
            raise ConfigurationError(
                f"key column {key_column!r} has unsupported type {key_type.simpleString()}; "
                "use a string, binary, numeric, boolean, date or timestamp column"
            )
        if schemas.key is not None:
            key = registry_key(key_column, schemas.key)
        else:
            key = _as_binary(F.col(key_column), key_type)
        if require_keys:
            key = F.when(
                F.col(key_column).isNull(),
                F.raise_error(F.lit(f"{NULL_KEY_MARK}: key column {key_column!r} is null")),
            ).otherwise(key)
    text_value = False
    if wire.value_format is not None:
        if value_column is not None:
            field(value_column, "value")
        value = (
            registry_value(df, value_column, schemas.value)
            if schemas.value is not None
            else F.lit(None).cast(_BINARY)  # columns checked; encoded once resolved
        )
    elif value_column is None:
        text_value = text_values
        value = F.to_json(F.struct(*[F.col(c) for c in df.columns]))
        value = value if text_value else value.cast(_BINARY)
    else:
        value_type = field(value_column, "value")
        if not isinstance(value_type, _TEXT_TYPES):
            raise ConfigurationError(
                f"value column {value_column!r} has unsupported type "
                f"{value_type.simpleString()}; use a string or binary column, or no "
                "value_column for the row as JSON"
            )
        text_value = text_values and isinstance(value_type, T.StringType)
        value = F.col(value_column) if text_value else _as_binary(F.col(value_column), value_type)
    headers = []
    for name in header_columns:
        header_type = field(name, "header")
        if not isinstance(header_type, _TEXT_TYPES):
            raise ConfigurationError(
                f"header column {name!r} has unsupported type {header_type.simpleString()}; "
                "use a string or binary column"
            )
        headers.append(_as_binary(F.col(name), header_type).alias(HEADER_PREFIX + name))
    if wire.tombstone_when is not None:
        null = F.lit(None).cast(T.StringType() if text_value else _BINARY)
        value = F.when(tombstone_condition(df, wire.tombstone_when, key_column), null).otherwise(
            value
        )
    extra = []
    if wire.timestamp_column is not None:
        extra.append(timestamp_value(df, wire.timestamp_column).alias(TIMESTAMP))
    if route is not None and route.column is not None:
        extra.append(_topic(route, field(route.column, "topic")).alias(TOPIC))
    return [key.alias(KEY), value.alias(VALUE), *headers, *extra]


def _topic(route: Routing, data_type: T.DataType) -> Column:
    """Each row's topic; a row naming none of the declared topics (or null) fails the job
    with :data:`UNKNOWN_TOPIC_MARK` (in the shuffle's map stage: before any writer opens)."""
    if not isinstance(data_type, T.StringType):
        raise ConfigurationError(
            f"topic column {route.column!r} has type {data_type.simpleString()}; use a string "
            "column of topic names"
        )
    named = F.col(str(route.column))
    return F.when(
        named.isNull() | ~named.isin(*route.topics),
        F.raise_error(F.concat(F.lit(f"{UNKNOWN_TOPIC_MARK}: "), F.coalesce(named, F.lit("null")))),
    ).otherwise(named)


def resolved_schemas(
    df: DataFrame,
    route: Routing,
    wire: WireOptions,
    key_column: str | None,
    value_column: str | None,
) -> Schemas:
    """The registry's schemas, asked per topic (a subject per topic under the topic-name
    strategies); every topic must get the same schema id, as a record carries one id."""
    found = [resolve_schemas(df, t, wire, key_column, value_column) for t in route.topics]
    for role in ("value", "key"):
        ids = {
            t: getattr(s, role).schema_id
            for t, s in zip(route.topics, found, strict=True)
            if getattr(s, role) is not None
        }
        if len(set(ids.values())) > 1:
            raise ConfigurationError(
                f"the registry gives the topics different {role} schema ids {ids}; a record's "
                "bytes carry one id: register the same schema under each subject, or use "
                "subject_name_strategy='record_name'; nothing was written"
            )
    return found[0]


def _as_binary(column: Column, data_type: T.DataType) -> Column:
    """Cast by type, not by name: a name goes through Spark's SQL parser, whose first use
    (its grammar loaded in the driver's JVM) was a tenth of the driver's time between
    the source's read and the write (docs/performance.md)."""
    if isinstance(data_type, T.BinaryType):
        return column
    text = column if isinstance(data_type, T.StringType) else column.cast(T.StringType())
    return text.cast(_BINARY)
