"""The prepare application as the prepare operator drives it, free of Airflow.

Its command-line source options, which spark-submit to run, the private settings file,
what its manifest must hold,
and the summary that goes to XCom (counts, ids and deadlines, never settings); and the
same application as loss repair drives it (only the lost partitions, checked against the
recorded counts).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .. import defaults
from ..errors import BrokerFetchError, ConfigurationError, Kafka2pcError, RepairImpossibleError
from ..transaction.committable import Committable
from ..transaction.manifest import Manifest
from . import PROJECT_JAR, PROTOBUF_JAVA
from .writers import AUTO_WRITER, JVM_WRITER

if TYPE_CHECKING:  # the ledger (SQLAlchemy) stays out of the Spark application's imports
    from ..ledger import Batch, Participant

log = logging.getLogger(__name__)

#: Keys of ``source``: exactly one of the first three, plus the optional ones.
SOURCE_KINDS = ("sql", "table", "path")
SOURCE_OPTIONAL = ("format", "options", "filter")


def source_arguments(source: object) -> list[str]:
    """The prepare application's source options for ``source``; a clear error when malformed."""
    if not isinstance(source, Mapping):
        raise ConfigurationError(
            'source must be a dict: {"sql": ...}, {"table": ...} or {"path": ..., "format": ...}'
        )
    kinds = [k for k in SOURCE_KINDS if source.get(k) not in (None, "")]
    unknown = sorted(set(source) - set(SOURCE_KINDS) - set(SOURCE_OPTIONAL))
    if unknown:
        raise ConfigurationError(
            f"source has unknown keys {unknown}; known: {SOURCE_KINDS + SOURCE_OPTIONAL}"
        )
    if len(kinds) != 1:
        raise ConfigurationError(
            f"source needs exactly one of {SOURCE_KINDS}, got {kinds or 'none'}"
        )
    kind = kinds[0]
    if kind != "path" and ("format" in source or "options" in source):
        raise ConfigurationError("source 'format' and 'options' apply to a 'path' source only")
    args = [f"--source-{kind}", str(source[kind])]
    if kind == "path":
        args += ["--source-format", str(source.get("format") or "parquet")]
        options = source.get("options") or {}
        if not isinstance(options, Mapping):
            raise ConfigurationError("source 'options' must be a dict of reader options")
        for key, value in options.items():
            args += ["--source-option", f"{key}={value}"]
    if source.get("filter"):
        args += ["--filter", str(source["filter"])]
    return args


def local_path(uri: str) -> Path | None:
    """The local file system path ``uri`` names, or None for a remote URI (s3a://, hdfs://)."""
    parts = urlsplit(uri)
    if parts.scheme in ("", "file"):
        return Path(parts.path if parts.scheme else uri)
    return None


def spark_submit_binary() -> str:
    """``spark-submit`` from PATH, else the one inside the installed pyspark (a pip-installed
    pyspark puts none on PATH, but ships one)."""
    found = shutil.which("spark-submit")
    if found:
        return found
    try:
        import pyspark
    except ImportError:
        return "spark-submit"
    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


@contextmanager
def private_config_file(settings: Mapping[str, Any], name: str = "kafka.json") -> Iterator[Path]:
    """``settings`` as JSON in a file only this user can read, removed afterwards: how
    credentials (and the export's spec) reach the Spark job without showing on a command
    line."""
    directory = Path(tempfile.mkdtemp(prefix="kafka2pc-conf-"))  # mode 0700
    path = directory / name
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(dict(settings), handle)
        yield path
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def check_num_partitions(num_partitions: object) -> None:
    if (
        isinstance(num_partitions, bool)
        or not isinstance(num_partitions, int)
        or num_partitions < 1
    ):
        raise ConfigurationError(
            f"num_partitions must be an integer >= 1 (one Spark partition and one Kafka "
            f"transaction each), got {num_partitions!r}"
        )


def _check_topics(prepared: Manifest, batch: Batch) -> None:
    if prepared.topics != batch.topics:
        raise Kafka2pcError(
            f"the manifest is for topics {list(prepared.topics)}, not {list(batch.topics)}"
        )


def committables_for(
    prepared: Manifest, batch: Batch, timeout_ms: int = defaults.TRANSACTION_TIMEOUT_MS
) -> list[Committable]:
    """One committable per leased id, in order; an empty source yields empty ones."""
    ids = list(batch.transactional_ids)
    _check_topics(prepared, batch)
    if not prepared.committables and prepared.source_rows == 0:
        now_ms = int(time.time() * 1000)
        return [Committable.empty(tid, now_ms, timeout_ms) for tid in ids]
    got = [c.transactional_id for c in prepared.committables]
    if got != ids:
        raise Kafka2pcError(f"the manifest's participants {got} are not the leased ids {ids}")
    return list(prepared.committables)


@dataclass(frozen=True)
class Repair:
    """Loss repair: rewrite only ``partitions`` (indexes), each under its own id of
    ``transactional_ids``, and only if every partition of the recomputed input still holds
    ``expected_rows[i]`` rows; otherwise :class:`SourceChangedError`, nothing written."""

    partitions: Sequence[int]
    expected_rows: Sequence[int]
    #: How the prepare being repaired partitioned (:data:`~..transaction.manifest.ALIGNED`
    #: or ``HASH``, the ledger's record): the repair partitions alike, whatever the topic
    #: looks like now. None (a batch recorded before the ledger kept it): decided afresh.
    partitioning: str | None = None
    #: With :data:`~..transaction.manifest.SOURCE`: the prepare's
    #: :meth:`~.source_splits.SourceSplits.to_dict` (the ledger's record).
    source_splits: Mapping[str, Any] | None = None


def repair_of(
    participants: Sequence[Participant],
    lost: Sequence[Participant],
    partitioning: str | None,
    source_splits: Mapping[str, Any] | None = None,
) -> Repair:
    """The loss repair of ``lost``: write only those partitions, and only if every
    partition still holds the rows its participant recorded, partitioned as the prepare did
    (``partitioning``, the ledger's record; None: not recorded; with source splits,
    ``source_splits``: their recorded settings and fingerprint, no secrets)."""
    if [p.index for p in participants] != list(range(len(participants))):
        raise RepairImpossibleError(
            f"the batch's participants are indexed {[p.index for p in participants]}, "
            "not 0..n-1: the partitioning cannot be recomputed"
        )
    return Repair(
        tuple(sorted(p.index for p in lost)),
        tuple(p.committable.record_count for p in participants),
        partitioning,
        None if source_splits is None else dict(source_splits),
    )


def repair_argv(repair: Repair | None) -> list[str]:
    """The application's loss-repair options for ``repair`` (none outside a repair)."""
    if repair is None:
        return []
    return [
        "--only-partitions",
        ",".join(str(i) for i in repair.partitions),
        "--expected-partition-rows",
        ",".join(str(n) for n in repair.expected_rows),
        *(["--partitioning", repair.partitioning] if repair.partitioning else []),
        *(
            ["--source-splits", json.dumps(dict(repair.source_splits))]
            if repair.source_splits
            else []
        ),
    ]


def repair_arguments(
    participants: Sequence[Participant],
    lost: Sequence[Participant],
    partitioning: str | None,
    source_splits: Mapping[str, Any] | None = None,
) -> list[str]:
    """:func:`repair_argv` of :func:`repair_of`: the flags a repair run by hand takes."""
    return repair_argv(repair_of(participants, lost, partitioning, source_splits))


def repaired_committables(
    prepared: Manifest, batch: Batch, lost: Sequence[Participant]
) -> dict[int, Committable]:
    """The re-prepared committables by partition index, from a repair run's manifest.

    A manifest that says the application refused (the source changed or is gone) raises
    :class:`RepairImpossibleError` with its reason.
    """
    refused = prepared.metadata.get("refused")
    if refused:
        raise RepairImpossibleError(str(refused))
    _check_topics(prepared, batch)
    indexes = sorted(p.index for p in lost)
    written = prepared.metadata.get("partitions")
    if written != indexes or len(prepared.committables) != len(indexes):
        raise Kafka2pcError(
            f"the repair manifest holds partitions {written} "
            f"({len(prepared.committables)} committables), not the lost {indexes}"
        )
    return dict(zip(indexes, prepared.committables, strict=True))


def summary(batch: Batch, participants: Sequence[Participant]) -> dict[str, Any]:
    """What the prepare hands downstream through XCom: counts, ids, deadlines; no settings."""
    from ..ledger.store import earliest_deadline_ms

    earliest = earliest_deadline_ms(participants)
    return {
        **batch.summary(),
        "source_rows": batch.source_rows,
        "records": sum(p.committable.record_count for p in participants),
        "participants": [
            {
                "partition": p.index,
                "transactional_id": p.transactional_id,
                "records": p.committable.record_count,
            }
            for p in participants
        ],
        "earliest_timeout": None
        if earliest is None
        else datetime.fromtimestamp(earliest / 1000, UTC).isoformat(),
        "seconds_left": None if earliest is None else round(earliest / 1000 - time.time()),
    }


def with_project_jar(
    conf: Mapping[str, str], writer: str = AUTO_WRITER, *, protobuf: bool = False
) -> dict[str, str]:
    """``conf`` with the project's jar added to ``spark.jars`` (after any jars it names).

    On the driver's classpath from the start, the key hash UDF registers at the first try:
    without it, the prepare spent a failed lookup (a Java exception) and an ``ADD JAR``
    command between the session's start and its first job (docs/performance-startup.md).
    ``--jars`` given to spark-submit wins over ``spark.jars``; ``ADD JAR`` still covers it.

    With the JVM writer, kafka-clients goes in before it: the writer's classes, loaded from
    the session's own class path, can only see a Kafka client loaded there too (one added
    later by ``ADD JAR`` lives in a child class loader they cannot see). Under ``auto``
    a jar that cannot be fetched is left out: the prepare then uses the Python writer.
    With ``protobuf`` (a registry Protobuf format), protobuf-java goes in likewise: the
    project's Protobuf encoder can only see it there.
    """
    jars = [j for j in conf.get("spark.jars", "").split(",") if j.strip()]
    wanted = [PROJECT_JAR]
    if writer in (JVM_WRITER, AUTO_WRITER) and not _names_kafka_clients(conf, jars):
        from .jvm_writer import kafka_clients_jar  # fetched once into the cache

        try:
            wanted.insert(0, str(kafka_clients_jar()))
        except BrokerFetchError:
            if writer == JVM_WRITER:
                raise
            log.warning("kafka-clients cannot be fetched: the prepare uses the Python writer")
    if protobuf and not any("protobuf-java" in jar for jar in jars):
        from .maven import fetch_jar

        wanted.insert(0, str(fetch_jar(PROTOBUF_JAVA)))
    jars += [jar for jar in wanted if jar not in jars]
    return {**conf, "spark.jars": ",".join(jars)}


def _names_kafka_clients(conf: Mapping[str, str], jars: Sequence[str]) -> bool:
    """The user already brings a Kafka client (as a jar or a package)."""
    packages = conf.get("spark.jars.packages", "")
    return "kafka-clients" in packages or any("kafka-clients" in jar for jar in jars)
