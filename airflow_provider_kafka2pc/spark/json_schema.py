"""JSON Schema in the schema registry's wire format: the 5-byte header, then the JSON that
Spark's ``to_json`` writes, in the JVM.

Spark has no JSON Schema converter, so the schema of a DataFrame is derived here from its
Spark types, as ``to_json`` renders them (null fields are left out, so nullable fields are
simply not ``required``). A given schema is checked once, on the driver, against the
columns: every required property is a column, every property typed compatibly; a nullable
column that the schema requires is guarded in the shuffle's map stage (the caller's job).
Per-record validation, which Confluent's serializer does, is not repeated: the values are
built from the columns that were checked.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import ConfigurationError

_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_NUMBER = (T.FloatType, T.DoubleType, T.DecimalType)


def json_type(data_type: T.DataType) -> dict[str, Any]:
    """The JSON Schema of one Spark type, as ``to_json`` writes it."""
    if isinstance(data_type, T.StructType):
        return {
            "type": "object",
            "properties": {f.name: json_type(f.dataType) for f in data_type.fields},
            "required": [f.name for f in data_type.fields if not f.nullable],
        }
    if isinstance(data_type, T.ArrayType):
        return {"type": "array", "items": json_type(data_type.elementType)}
    if isinstance(data_type, T.MapType):
        return {"type": "object", "additionalProperties": json_type(data_type.valueType)}
    if isinstance(data_type, _INTEGRAL):
        return {"type": "integer"}
    if isinstance(data_type, _NUMBER):
        return {"type": "number"}
    if isinstance(data_type, T.BooleanType):
        return {"type": "boolean"}
    if isinstance(data_type, T.DateType):
        return {"type": "string", "format": "date"}
    if isinstance(data_type, T.TimestampType | T.TimestampNTZType):
        return {"type": "string", "format": "date-time"}
    if isinstance(data_type, T.StringType | T.BinaryType):  # binary: base64 text
        return {"type": "string"}
    raise ConfigurationError(
        f"a {data_type.simpleString()} column has no JSON Schema here; cast it first"
    )


def derive_schema(data_type: T.DataType, title: str) -> str:
    """The JSON Schema of a struct (the row, or a struct column), titled ``title``."""
    if not isinstance(data_type, T.StructType):
        raise ConfigurationError(
            "JSON Schema values and keys must be a struct: the whole row, or a struct "
            f"column (got {data_type.simpleString()})"
        )
    return json.dumps(
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "title": title,
            **json_type(data_type),
        }
    )


def check_encodable(data_type: T.DataType, schema: str, role: str) -> list[str]:
    """Refuse columns a given schema cannot describe; returns the nullable columns it
    requires (to be guarded in the map stage)."""
    if not isinstance(data_type, T.StructType):
        derive_schema(data_type, "x")  # the error for a non-struct
    parsed = json.loads(schema)
    if not isinstance(parsed, dict) or parsed.get("type", "object") != "object":
        raise ConfigurationError(f"the {role} JSON Schema must describe an object")
    fields = {f.name: f for f in data_type.fields}
    properties = parsed.get("properties") or {}
    problems = [
        f"required property {name!r} is not a column"
        for name in parsed.get("required") or []
        if name not in fields
    ]
    if parsed.get("additionalProperties") is False:
        problems += [f"column {n!r} is not a property" for n in fields if n not in properties]
    for name, wanted in properties.items():
        if name in fields and isinstance(wanted, dict) and "type" in wanted:
            have = json_type(fields[name].dataType)["type"]
            allowed = wanted["type"] if isinstance(wanted["type"], list) else [wanted["type"]]
            if have not in allowed and not (have == "integer" and "number" in allowed):
                problems.append(f"column {name!r} is {have}, the schema says {wanted['type']}")
    if problems:
        raise ConfigurationError(
            f"the {role} columns cannot be written with the JSON Schema: "
            f"{'; '.join(problems)}; nothing was written"
        )
    return [n for n in parsed.get("required") or [] if fields[n].nullable]


def encode(column: Column, header: bytes) -> Column:
    """``column`` (a struct) as the registry's wire format: ``header`` + its JSON."""
    return F.concat(F.lit(header), F.to_json(column).cast("binary"))
