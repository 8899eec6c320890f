"""The prepare's Spark job, described once: what a re-run (a loss repair) needs, frozen.

The prepare operator builds a :class:`SparkJob` from its rendered arguments: the export's
:class:`~.export_spec.ExportSpec` and how to run it (connections by id, Spark settings,
spark-submit's arguments). :class:`~..hooks.spark_job.SparkJobHook` runs it, and the ledger
records it beside the committables, so the commit task, the recovery sensor and
``kafka2pc recover`` find it without walking a DAG. It holds no secret: Kafka, registry and
Spark credentials stay in their connections and are read when the job runs; Spark settings
and environment variables whose name says "secret" are left out of the record
(:meth:`SparkJob.record`), by name in ``withheld``.

What depends on the machine (the packaged application's path, spark-submit's path, the
project jar, the Python interpreter) is worked out where the job runs, not recorded.

Record versions, each read by its own reader (:meth:`SparkJob.from_record`): 1 (releases up
to 0.2.0) kept the export as the application's flags (``source`` + ``writer_arguments``);
2 keeps the :class:`~.export_spec.ExportSpec` as JSON (``export``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..errors import ConfigurationError
from .export_spec import ExportSpec, from_argv
from .job import source_arguments

#: Version of :meth:`SparkJob.record`'s layout; a reader refuses a newer one.
SPARK_JOB_VERSION = 2

#: Names of Spark settings and environment variables kept out of the record: credentials
#: (``spark.hadoop.fs.s3a.secret.key``, ``AWS_SECRET_ACCESS_KEY``, a token, a password).
SECRET_NAME = re.compile(
    r"secret|password|passwd|passphrase|token|credential|private[._-]?key|access[._-]?key"
    r"|api[._-]?key|authorization|sasl\.jaas",
    re.IGNORECASE,
)

Pairs = tuple[tuple[str, Any], ...]


def _pairs(mapping: Mapping[str, Any] | None) -> Pairs:
    return tuple((str(k), v) for k, v in (mapping or {}).items())


@dataclass(frozen=True)
class SparkJob:
    """One prepare's Spark job: the export's spec and how to submit it. The per-run
    options (leased ids, manifest, job label, settings files) are the hook's, per run."""

    #: What the export writes, with its ``source`` (the same object on every path).
    export: ExportSpec
    #: The ``spark`` or ``spark_connect`` connection; ``spark_mode`` as the user gave it.
    spark_conn_id: str
    kafka_conn_id: str
    spark_mode: str | None = None
    #: The schema registry's connection, when a registry format is asked.
    registry_conn_id: str | None = None
    #: The Spark job's name (spark-submit ``--name``, the Connect session's app name).
    name: str = "kafka2pc-prepare"
    #: The user's Spark settings (this package's defaults and jar are added at run time).
    conf: Pairs = ()
    #: Environment variables for spark-submit.
    env_vars: Pairs = ()
    #: Every other spark-submit argument the user gave (``packages``, ``executor_memory``,
    #: ``spark_binary``, ``deploy_mode``, ...): JSON values only.
    submit: Pairs = ()
    #: Where the job writes its manifest (None: a temporary local directory).
    manifest_dir: str | None = None
    #: Names of settings the record left out (they looked like secrets).
    withheld: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.export.source is None:
            raise ConfigurationError("the Spark job's export spec needs a source")

    @property
    def source(self) -> Mapping[str, Any]:
        """The export's ``source`` (sql, table or path; a loss repair checks a path is there)."""
        return self.export.source or {}

    @property
    def writer(self) -> str:
        """Which writer (a JVM writer needs kafka-clients on the class path: added at run time)."""
        return self.export.writer

    def conf_dict(self) -> dict[str, Any]:
        return dict(self.conf)

    def env_dict(self) -> dict[str, Any]:
        return dict(self.env_vars)

    def submit_dict(self) -> dict[str, Any]:
        return dict(self.submit)

    def record(self) -> dict[str, Any]:
        """JSON for the ledger: this job without the settings named like secrets."""
        conf = {k: v for k, v in self.conf if not SECRET_NAME.search(k)}
        env = {k: v for k, v in self.env_vars if not SECRET_NAME.search(k)}
        withheld = sorted(
            {*self.withheld, *(k for k, _ in (*self.conf, *self.env_vars) if SECRET_NAME.search(k))}
        )
        return {
            "version": SPARK_JOB_VERSION,
            "export": self.export.to_dict(),
            "spark_conn_id": self.spark_conn_id,
            "kafka_conn_id": self.kafka_conn_id,
            "spark_mode": self.spark_mode,
            "registry_conn_id": self.registry_conn_id,
            "name": self.name,
            "conf": conf,
            "env_vars": env,
            "submit": dict(self.submit),
            "manifest_dir": self.manifest_dir,
            "withheld": withheld,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> SparkJob:
        """The job a ledger row recorded, by the reader of its version; a clear error for
        a version this release cannot read."""
        version = record.get("version")
        reader = _READERS.get(version)  # type: ignore[arg-type]
        if reader is None:
            raise ConfigurationError(
                f"the recorded Spark job has layout version {version!r}; this kafka2pc reads "
                f"{sorted(_READERS)}: upgrade kafka2pc"
            )
        values = reader(record)
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in values.items() if k in known}
        for name in ("conf", "env_vars", "submit"):
            values[name] = _pairs(values.get(name))
        values["withheld"] = tuple(values.get("withheld") or ())
        return cls(**values)

    def with_conf(self, conf: Mapping[str, Any]) -> SparkJob:
        """This job with other Spark settings (e.g. OpenLineage's, for one run)."""
        return replace(self, conf=_pairs(conf))


def _read_version_1(record: Mapping[str, Any]) -> dict[str, Any]:
    """Releases up to 0.2.0: the export as the application's flags."""
    argv = [*source_arguments(record.get("source")), *(record.get("writer_arguments") or ())]
    return {**record, "export": from_argv(argv)}


def _read_version_2(record: Mapping[str, Any]) -> dict[str, Any]:
    return {**record, "export": ExportSpec.from_dict(record.get("export") or {})}


_READERS: dict[int, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    1: _read_version_1,
    2: _read_version_2,
}


def describe_job(
    *,
    export: ExportSpec,
    spark_conn_id: str,
    kafka_conn_id: str,
    conf: Mapping[str, Any] | None = None,
    env_vars: Mapping[str, Any] | None = None,
    submit: Mapping[str, Any] | None = None,
    **rest: Any,
) -> SparkJob:
    """A :class:`SparkJob` from plain mappings (what an operator holds)."""
    return SparkJob(
        export=export,
        spark_conn_id=spark_conn_id,
        kafka_conn_id=kafka_conn_id,
        conf=_pairs(conf),
        env_vars=_pairs(env_vars),
        submit=_pairs({k: v for k, v in (submit or {}).items() if v is not None}),
        **rest,
    )
