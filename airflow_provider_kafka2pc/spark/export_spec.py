"""One export's options, once: :class:`ExportSpec`, the same object on every path.

The TaskGroup and the prepare operator build it from their arguments and validate it once;
the ledger records it (inside :class:`~.job_spec.SparkJob`); spark-submit's application reads
it from one file (``--spec-file``); the Spark Connect prepare, ``prepare_in_job`` (inside
:class:`~.external.JobParameters`) and a loss repair take the same object; the writers'
settings are derived from it in :func:`~.prepare.prepare_export`.

The application's command line for manual use is generated from the fields
(:func:`add_arguments`, :meth:`ExportSpec.to_argv`, :func:`from_arguments`): each field's
``metadata`` says its flag and its help, so no option is restated per path.

Adding an option: add a field here (a JSON value, with its flag and help in ``metadata``,
checked in :meth:`ExportSpec.__post_init__`), then read it where it acts (usually
:mod:`.prepare`). The operator's and the TaskGroup's argument of the same name reach it
through :func:`export_spec`. docs/development.md walks through it.

Versions: :data:`EXPORT_SPEC_VERSION` is written with every dict; a reader refuses a newer
one by name. Version 1 is today's layout; an older record (the ledger's ``SparkJob``
version 1, application flags) is read by :func:`from_argv`, whose flags are still these.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any

from .. import defaults
from ..connection.registry import RegistryFormat
from ..errors import ConfigurationError
from ..transaction.manifest import ALIGNED, HASH, SOURCE
from ..transaction.routing import Routing, routing
from .job import source_arguments
from .partitionings import AUTO_PARTITIONING, REQUESTS, check_partitioning
from .writers import AUTO_WRITER, WRITERS, check_writer

#: Version of :meth:`ExportSpec.to_dict`'s layout; a reader refuses a newer one.
EXPORT_SPEC_VERSION = 1


def _option(help: str, **cli: Any) -> dict[str, Any]:
    """A field's ``metadata``: its help, and how the command line spells it (``flag``;
    ``kind``: text, int, float, bool, list (comma-separated), append (repeated), format
    (a JSON object), source (the source's flags); ``choices``."""
    return {"help": help, **cli}


@dataclass(frozen=True)
class ExportSpec:
    """What one export writes and how, whatever runs it (spark-submit, Spark Connect, a
    job of the user's own). No secret and no connection: those are the run's."""

    source: Mapping[str, Any] | None = field(
        default=None,
        metadata=_option(
            "sql, table or path (+ format, options, filter); None where the job brings the "
            "DataFrame (prepare_in_job)",
            kind="source",
        ),
    )
    topic: str | None = field(
        default=None, metadata=_option("every row's topic (or --topic-column and --topics)")
    )
    topic_column: str | None = field(
        default=None, metadata=_option("a string column naming each row's topic, one of --topics")
    )
    topics: tuple[str, ...] | None = field(
        default=None,
        metadata=_option("comma-separated: every topic --topic-column may name", kind="list"),
    )
    key_column: str | None = field(default=None, metadata=_option("the record key's column"))
    value_column: str | None = field(
        default=None, metadata=_option("a string/binary value column; default: the row as JSON")
    )
    header_columns: tuple[str, ...] = field(
        default=(),
        metadata=_option(
            "a string/binary column sent as a header (repeat)",
            flag="--header-column",
            kind="append",
        ),
    )
    value_format: RegistryFormat | None = field(
        default=None,
        metadata=_option(
            "values in the registry's wire format: a JSON object of RegistryFormat options, "
            'e.g. {} or {"schema_type": "JSON"} or {"schema_type": "PROTOBUF"}',
            kind="format",
        ),
    )
    key_format: RegistryFormat | None = field(
        default=None,
        metadata=_option("keys in the registry's wire format, likewise", kind="format"),
    )
    tombstone_when: str | None = field(
        default=None, metadata=_option("SQL condition: where true, a null value (a tombstone)")
    )
    timestamp_column: str | None = field(
        default=None, metadata=_option("the record timestamp (timestamp, or long epoch ms)")
    )
    allow_expiring_timestamps: bool = field(
        default=False,
        metadata=_option(
            "export record timestamps that the topic's time retention would delete at once "
            "(e.g. into a compacted topic)",
            kind="bool",
        ),
    )
    transaction_timeout_ms: int = field(
        default=defaults.TRANSACTION_TIMEOUT_MS,
        metadata=_option("how long the prepared transactions may stay open", kind="int"),
    )
    progress_interval_s: float = field(
        default=defaults.PROGRESS_INTERVAL_S,
        metadata=_option(
            "each partition logs rows written at most this often, and once done (0: never)",
            kind="float",
        ),
    )
    align_with_kafka: bool = field(
        default=True,
        metadata=_option(
            "each Spark partition owns the Kafka partitions p with p mod N = its index, where "
            "the export has a key and the topics' partitions are a multiple of N",
            kind="bool",
        ),
    )
    partitioning: str = field(
        default=AUTO_PARTITIONING,
        metadata=_option(
            "source-splits: the source's own file splits, no shuffle; kafka-aligned or hash: "
            "a shuffle; auto: source splits where the plan pins them, else aligned where that "
            "applies, else hash (docs/partitioning.md). Also spelt --no-shuffle / --shuffle",
            flag="--partition-by",
            choices=REQUESTS,
        ),
    )
    writer: str = field(
        default=AUTO_WRITER,
        metadata=_option(
            "who writes the transactions: python (confluent-kafka in Python workers), jvm "
            "(Kafka's Java producer in the executors), auto (the JVM one where it loads)",
            choices=WRITERS,
        ),
    )

    def __post_init__(self) -> None:
        if self.source is not None:
            source_arguments(self.source)  # a clear error for a malformed source
            object.__setattr__(self, "source", dict(self.source))
        if self.topics is not None:
            object.__setattr__(self, "topics", tuple(self.topics))
        object.__setattr__(self, "header_columns", tuple(self.header_columns))
        for name in ("value_format", "key_format"):
            value = getattr(self, name)
            if isinstance(value, Mapping):
                object.__setattr__(self, name, RegistryFormat.from_dict(value))
        self.route  # noqa: B018 -- routing() names a bad topic choice
        check_writer(self.writer)
        partitioning = check_partitioning(self.partitioning, self.align_with_kafka)
        if partitioning is None:  # the shuffle of earlier releases, aligned by the flag
            partitioning = ALIGNED if self.align_with_kafka else HASH
        object.__setattr__(self, "partitioning", partitioning)
        _check_number("transaction_timeout_ms", self.transaction_timeout_ms, minimum=1)
        _check_number("progress_interval_s", self.progress_interval_s, minimum=0)

    @property
    def route(self) -> Routing:
        """The topics: one ``topic``, or ``topic_column`` among ``topics``."""
        return routing(self.topic, self.topic_column, self.topics)

    @property
    def uses_registry(self) -> bool:
        return self.value_format is not None or self.key_format is not None

    @property
    def uses_protobuf(self) -> bool:
        """A registry Protobuf format (its encoder needs protobuf-java beside our jar)."""
        formats = (self.value_format, self.key_format)
        return any(f is not None and f.schema_type == "PROTOBUF" for f in formats)

    def replace(self, **changes: Any) -> ExportSpec:
        """This spec with ``changes``, validated again."""
        return replace(self, **changes)

    # -- JSON -----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        for name in ("value_format", "key_format"):
            value = getattr(self, name)
            values[name] = None if value is None else value.to_dict()
        values["header_columns"] = list(self.header_columns)
        values["topics"] = None if self.topics is None else list(self.topics)
        return {"version": EXPORT_SPEC_VERSION, **values}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | str) -> ExportSpec:
        """A spec from :meth:`to_dict` (or its JSON); a clear error for another version
        or an unknown option."""
        values = dict(json.loads(data) if isinstance(data, str) else data)
        version = values.pop("version", None)
        if version != EXPORT_SPEC_VERSION:
            raise ConfigurationError(
                f"an export spec of version {version!r}; this kafka2pc reads version "
                f"{EXPORT_SPEC_VERSION}: install the same kafka2pc where the job runs as in "
                "Airflow"
            )
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigurationError(f"the export spec has unknown options {unknown}")
        return cls(**values)

    # -- the command line ---------------------------------------------------------------------

    def to_argv(self) -> list[str]:
        """The application's flags for this spec (for a person to run it by hand)."""
        argv: list[str] = []
        for f in fields(self):
            argv += _flags(f, getattr(self, f.name))
        return argv


def _check_number(name: str, value: object, *, minimum: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise ConfigurationError(f"{name} must be a number >= {minimum}, got {value!r}")


def _flag(f: Any) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _flags(f: Any, value: Any) -> list[str]:
    """One field's flags for ``value`` (none where it is the default)."""
    kind = f.metadata.get("kind", "text")
    default = f.default if f.default is not MISSING else None
    if kind == "source":
        return [] if value is None else source_arguments(value)
    if kind == "bool":
        name = _flag(f)[2:]
        return [] if value == default else [f"--{name}" if value else f"--no-{name}"]
    if value is None or value == default or value == ():
        return []
    if kind == "append":
        return [arg for item in value for arg in (_flag(f), str(item))]
    if kind == "list":
        return [_flag(f), ",".join(value)]
    if kind == "format":
        return [_flag(f), json.dumps(value.to_dict(), sort_keys=True)]
    return [_flag(f), str(value)]


def json_object(text: str) -> dict[str, Any]:
    """An argparse type: a JSON object (a registry format's options, a recorded split)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object: {exc}") from None
    if not isinstance(data, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return data


def _comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The spec's flags on ``parser``, generated from the fields, and ``--spec-file``."""
    parser.add_argument(
        "--spec-file", help="the export spec as JSON (ExportSpec); the flags below then unused"
    )
    for f in fields(ExportSpec):
        kind = f.metadata.get("kind", "text")
        if kind == "source":
            _add_source_arguments(parser)
            continue
        options: dict[str, Any] = {"help": f.metadata["help"], "dest": f.name, "default": None}
        if kind == "bool":
            options["action"] = argparse.BooleanOptionalAction
        elif kind == "append":
            options.update(action="append", default=[])
        else:
            options["type"] = {
                "int": int,
                "float": float,
                "list": _comma_list,
                "format": json_object,
            }.get(kind, str)
        if "choices" in f.metadata:
            options["choices"] = f.metadata["choices"]
        parser.add_argument(_flag(f), **options)
    # The spelling of earlier releases (and of the ledger's version-1 records).
    parser.add_argument("--shuffle", action=argparse.BooleanOptionalAction, help=argparse.SUPPRESS)


def _add_source_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--source-table", help="a table name known to the Spark catalog")
    source.add_argument("--source-path", help="a path or URI, read with --source-format")
    source.add_argument("--source-sql", help="a SQL query")
    parser.add_argument("--source-format", help="format for --source-path (default parquet)")
    parser.add_argument(
        "--source-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="reader option for --source-path (e.g. header=true)",
    )
    parser.add_argument("--filter", help="a SQL predicate applied to the source")


def _source(args: argparse.Namespace) -> dict[str, Any] | None:
    kinds = {k: getattr(args, f"source_{k}") for k in ("table", "path", "sql")}
    given = {k: v for k, v in kinds.items() if v is not None}
    if not given:
        return None
    source: dict[str, Any] = dict(given)
    if "path" in given:
        source["format"] = args.source_format or "parquet"
        if args.source_option:
            source["options"] = dict(item.split("=", 1) for item in args.source_option)
    if args.filter:
        source["filter"] = args.filter
    return source


def from_arguments(args: argparse.Namespace) -> ExportSpec:
    """The spec a parsed command line names: its ``--spec-file``, else its flags."""
    if getattr(args, "spec_file", None):
        try:
            with open(args.spec_file) as handle:
                return ExportSpec.from_dict(handle.read())
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"--spec-file {args.spec_file}: {exc}") from None
    values: dict[str, Any] = {}
    for f in fields(ExportSpec):
        kind = f.metadata.get("kind", "text")
        if kind == "source":
            values["source"] = _source(args)
        elif getattr(args, f.name) not in (None, []):
            values[f.name] = getattr(args, f.name)
    shuffle = getattr(args, "shuffle", None)
    if "partitioning" not in values and shuffle is not None:
        values["partitioning"] = None if shuffle else SOURCE  # None: by --align-with-kafka
    return ExportSpec(**values)


def from_argv(argv: Sequence[str]) -> ExportSpec:
    """The spec of an application command line (a ledger record of version 1 keeps one)."""
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    add_arguments(parser)
    try:
        args, _ = parser.parse_known_args(list(argv))
    except (argparse.ArgumentError, SystemExit) as exc:
        raise ConfigurationError(f"the recorded command line is unreadable: {exc}") from None
    return from_arguments(args)


def export_spec(**options: Any) -> ExportSpec:
    """A spec from an operator's keyword arguments: the known ones taken, a clear error for
    a value the spec refuses."""
    known = {f.name for f in fields(ExportSpec)}
    return ExportSpec(**{k: v for k, v in options.items() if k in known})


#: Every option a user can set, in the spec's order (the docs' matrix lists them).
OPTIONS = tuple(f.name for f in fields(ExportSpec))
__all__ = [
    "EXPORT_SPEC_VERSION",
    "OPTIONS",
    "REQUESTS",
    "ExportSpec",
    "add_arguments",
    "export_spec",
    "from_arguments",
    "from_argv",
]
