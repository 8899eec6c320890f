"""Schema registry, driver side: one lookup or registration per export, never per record.

Values (and keys) in Confluent's wire format are ``0x00``, the schema id as a 4-byte
big-endian integer, then the encoded payload. The schema id is what the registry gives for
(subject, schema): asked once here, by the driver, before any transaction opens; the
payload itself is encoded in the JVM (:mod:`..spark.avro`). So an unreachable registry or a
schema it refuses fails the export with nothing written.

The registry settings are confluent-kafka's ``SchemaRegistryClient`` settings (``url``,
``basic.auth.user.info``, ``ssl.*``); they carry credentials, so they are never logged nor
quoted: only :func:`registry_address` (the URL without user info) is.
"""

from __future__ import annotations

import enum
import json
import struct
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import ConfigurationError, SchemaRefusedError, SchemaRegistryUnreachableError

#: Confluent's wire format: magic byte 0, then the schema id (4 bytes, big-endian).
MAGIC_BYTE = 0
#: Settings ``SchemaRegistryClient`` takes; anything else is refused (a typo would
#: otherwise be ignored, or refused later with the value quoted).
CLIENT_SETTINGS = frozenset(
    {
        "url",
        "basic.auth.user.info",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "timeout",
        "max.retries",
        "retries.wait.ms",
        "retries.max.wait.ms",
        "cache.capacity",
        "cache.latest.ttl.sec",
    }
)
_SECRET_SETTINGS = frozenset({"basic.auth.user.info", "ssl.key.password"})
#: How long one registry request may take unless the settings say (seconds).
DEFAULT_TIMEOUT_S = 10
#: Retries of a request that got no answer; the client's default (3, up to 20 s apart)
#: would hold a failing export for a minute before it says the registry is down.
DEFAULT_MAX_RETRIES = 1


class SchemaType(enum.StrEnum):
    """The registry's schema types we encode in the JVM (docs/wire-formats.md)."""

    AVRO = "AVRO"
    #: JSON Schema: the payload is the JSON Spark's ``to_json`` writes.
    JSON = "JSON"
    #: Protobuf (proto3): the message indexes, then the message (``spark/protobuf.py``).
    PROTOBUF = "PROTOBUF"


class SubjectNameStrategy(enum.StrEnum):
    """How the subject is named, as Confluent's serializers name it."""

    #: ``<topic>-value`` / ``<topic>-key`` (the serializers' default).
    TOPIC_NAME = "topic_name"
    #: the record's full name (``namespace.name``): one schema for many topics.
    RECORD_NAME = "record_name"
    #: ``<topic>-<namespace.name>``: several record types in one topic.
    TOPIC_RECORD_NAME = "topic_record_name"


@dataclass(frozen=True)
class RegistryFormat:
    """What the user asks for a value (or key): Avro (or JSON Schema, or Protobuf) in the
    registry's wire format.

    :param schema: an Avro schema, or a JSON Schema with ``schema_type="JSON"`` (JSON
        text), or proto3 ``.proto`` text with ``schema_type="PROTOBUF"``; None: derived from
        the DataFrame's columns.
    :param subject_name_strategy: one of :class:`SubjectNameStrategy`'s values.
    :param record_name: the derived schema's record name (ignored with ``schema``, except
        for Protobuf, where it picks the message of the file to write, else its first one).
    :param namespace: the derived schema's namespace (a Protobuf package; a JSON Schema's
        title is ``namespace.record_name``; ignored with ``schema``).
    :param auto_register: register the schema under the subject (the registry checks its
        compatibility); False: it must already be registered there, else the export fails.
    :param schema_type: ``AVRO`` (default), ``JSON`` (JSON Schema) or ``PROTOBUF``.
    """

    schema: str | None = None
    subject_name_strategy: str = SubjectNameStrategy.TOPIC_NAME.value
    record_name: str = "topLevelRecord"
    namespace: str = ""
    auto_register: bool = True
    schema_type: str = SchemaType.AVRO.value

    def __post_init__(self) -> None:
        try:
            SubjectNameStrategy(self.subject_name_strategy)
        except ValueError:
            raise ConfigurationError(
                f"subject_name_strategy {self.subject_name_strategy!r} is not one of "
                f"{[s.value for s in SubjectNameStrategy]}"
            ) from None
        if self.schema_type not in tuple(SchemaType):
            raise ConfigurationError(
                f"schema_type {self.schema_type!r}: one of {[t.value for t in SchemaType]}"
            )
        if self.schema is not None and self.schema_type != SchemaType.PROTOBUF:
            parse_schema(self.schema)
        elif self.schema is not None and (not isinstance(self.schema, str) or not self.schema):
            raise ConfigurationError("a Protobuf schema must be .proto text")
        if not self.record_name or not isinstance(self.record_name, str):
            raise ConfigurationError("record_name must be a non-empty string")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RegistryFormat:
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigurationError(
                f"unknown registry format option(s) {unknown}; "
                f"known: {sorted(cls.__dataclass_fields__)}"
            )
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry knows it: the subject, its id, its text."""

    subject: str
    schema_id: int
    schema: str
    schema_type: str = SchemaType.AVRO.value
    #: Protobuf: the message written (its full name) and its indexes after the id.
    message: str | None = None
    message_indexes: bytes = b""

    @property
    def header(self) -> bytes:
        return wire_header(self.schema_id) + self.message_indexes


def wire_header(schema_id: int) -> bytes:
    """The 5 bytes before every payload: magic byte 0, the schema id big-endian."""
    return struct.pack(">bI", MAGIC_BYTE, schema_id)


def parse_schema(schema: str) -> Any:
    """The schema's JSON; a clear error when it is not JSON."""
    try:
        return json.loads(schema)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ConfigurationError(f"the Avro schema is not valid JSON: {exc}") from None


def record_full_name(schema: str, schema_type: str = SchemaType.AVRO.value) -> str | None:
    """``namespace.name`` of a named Avro (record, enum, fixed) schema, a JSON Schema's
    ``title`` (what Confluent's JSON serializer names the record by); else None."""
    parsed = parse_schema(schema)
    if schema_type == SchemaType.JSON:
        title = parsed.get("title") if isinstance(parsed, dict) else None
        return str(title) if title else None
    if not isinstance(parsed, dict) or "name" not in parsed:
        return None
    name = str(parsed["name"])
    namespace = parsed.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def subject_name(
    strategy: str,
    topic: str,
    schema: str,
    *,
    is_key: bool = False,
    schema_type: str = SchemaType.AVRO.value,
    full_name: str | None = None,
) -> str:
    """The subject ``strategy`` gives for ``schema`` on ``topic`` (``full_name``: the
    record's, where the caller knows it, as for a Protobuf message)."""
    chosen = SubjectNameStrategy(strategy)
    if chosen is SubjectNameStrategy.TOPIC_NAME:
        return f"{topic}-{'key' if is_key else 'value'}"
    full_name = full_name or record_full_name(schema, schema_type)
    if full_name is None:
        raise ConfigurationError(
            f"subject_name_strategy {chosen.value!r} needs a named (record) schema; "
            f"this one has no name: use {SubjectNameStrategy.TOPIC_NAME.value!r}"
        )
    if chosen is SubjectNameStrategy.RECORD_NAME:
        return full_name
    return f"{topic}-{full_name}"


def registry_address(settings: Mapping[str, Any]) -> str:
    """The registry's URL(s) without user info: the only form of the settings fit to log."""
    urls = str(settings.get("url", ""))
    shown = []
    for url in urls.split(","):
        parts = urlsplit(url.strip())
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        shown.append(urlunsplit((parts.scheme, netloc, parts.path, "", "")))
    return ",".join(shown)


def client_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` checked for ``SchemaRegistryClient``, with our bounded waits."""
    unknown = sorted(set(settings) - CLIENT_SETTINGS)
    if unknown:
        raise ConfigurationError(
            f"unknown schema registry setting(s) {unknown}; known: {sorted(CLIENT_SETTINGS)}"
        )
    url = settings.get("url")
    if not isinstance(url, str) or not all(
        urlsplit(u.strip()).scheme in ("http", "https") and urlsplit(u.strip()).hostname
        for u in url.split(",")
    ):
        raise ConfigurationError(
            "the schema registry needs a url such as http://registry:8081 "
            f"(got {registry_address(settings) or 'none'})"
        )
    return {"timeout": DEFAULT_TIMEOUT_S, "max.retries": DEFAULT_MAX_RETRIES, **settings}


def redacted(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings fit for a log line: credentials as ``***``, the URL without user info."""
    shown = {k: ("***" if k in _SECRET_SETTINGS else v) for k, v in settings.items()}
    if "url" in shown:
        shown["url"] = registry_address(settings)
    return shown


def resolve(
    settings: Mapping[str, Any],
    subject: str,
    schema: str,
    *,
    auto_register: bool = True,
    schema_type: str = SchemaType.AVRO.value,
    client: Any | None = None,
) -> RegisteredSchema:
    """The schema's id under ``subject``: registered (the registry checks compatibility)
    or, without ``auto_register``, looked up. One round trip; before anything opens.

    :raises SchemaRefusedError: incompatible, invalid, or not registered (lookup).
    :raises SchemaRegistryUnreachableError: no answer, or the registry failed (5xx).
    :raises ConfigurationError: the settings are wrong, or the credentials are refused.
    """
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    # The HTTP library the client sends with (httpx2, else httpx: its own choice).
    from confluent_kafka.schema_registry.common._httpx_compat import httpx
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    where = registry_address(settings)
    try:
        registry = client or SchemaRegistryClient(client_settings(settings))
    except (ValueError, TypeError) as exc:  # the client's own check of its settings
        raise ConfigurationError(
            f"the schema registry settings for {where} are refused by SchemaRegistryClient: "
            f"{type(exc).__name__}: {str(exc)[:200]}"
        ) from None
    try:
        wanted = Schema(schema, SchemaType(schema_type).value)
        if auto_register:
            schema_id = registry.register_schema(subject, wanted)
        else:
            schema_id = registry.lookup_schema(subject, wanted).schema_id
    except SchemaRegistryError as exc:
        raise _refusal(exc, subject, where, auto_register) from None
    except (httpx.HTTPError, OSError) as exc:  # nothing answered (the client's last URL's)
        raise SchemaRegistryUnreachableError(
            f"the schema registry at {where} did not answer ({type(exc).__name__}); "
            "nothing was written"
        ) from None
    return RegisteredSchema(subject, int(schema_id), schema, SchemaType(schema_type).value)


def _refusal(exc: Any, subject: str, where: str, auto_register: bool) -> Exception:
    """The error for a registry's refusal, by its HTTP status."""
    status = getattr(exc, "http_status_code", None)
    said = str(getattr(exc, "error_message", "") or "")[:300]
    if status == 409:
        return SchemaRefusedError(
            f"the schema registry at {where} refused the schema for subject {subject!r} as "
            f"incompatible with its registered versions ({said}); change the data or the "
            "subject's compatibility level; nothing was written"
        )
    if status == 404 and not auto_register:
        return SchemaRefusedError(
            f"the schema is not registered under subject {subject!r} at {where} and "
            "auto_register is off: register it first; nothing was written"
        )
    if status == 422:
        return SchemaRefusedError(
            f"the schema registry at {where} refused the schema for subject {subject!r} as "
            f"invalid ({said}); nothing was written"
        )
    if status in (401, 403):
        return ConfigurationError(
            f"the schema registry at {where} refused the credentials (HTTP {status}) for "
            f"subject {subject!r}; check the registry connection's login and password"
        )
    if isinstance(status, int) and status >= 500:
        return SchemaRegistryUnreachableError(
            f"the schema registry at {where} failed (HTTP {status}: {said}); nothing was written"
        )
    return SchemaRefusedError(
        f"the schema registry at {where} refused subject {subject!r} (HTTP {status}: {said}); "
        "nothing was written"
    )
