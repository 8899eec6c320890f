"""The prepare inside a PySpark job that another operator launches: the contract.

When the Spark job is started by something other than the prepare operator (Databricks,
EMR, Dataproc, the Kubernetes Spark operator, ``@task.pyspark``), the export splits the
prepare operator's work in three: a *lease* task (validate, lease the ids, fence them)
hands the run's parameters to the job; the user's script reads its source and calls
:func:`prepare_in_job`, which writes one open transaction per partition and the manifest;
a *record* task reads the manifest into the ledger. Decide, commit and abort follow as
in every export. The parameters hold no secret: the script brings the Kafka settings from
its platform's secret store (and the schema registry's, with a registry format)::

    from airflow_provider_kafka2pc.spark.external import prepare_in_job

    def main(spark, parameters):           # parameters: the lease task's XCom (a dict)
        df = spark.read.parquet("s3://bucket/orders/day=...")
        prepare_in_job(df, parameters, producer_config={"bootstrap.servers": ...},
                       registry={"url": ...})
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import ConfigurationError, PermanentError
from ..transaction.manifest import Manifest
from .export_spec import ExportSpec

log = logging.getLogger(__name__)

#: The version of :class:`JobParameters`' dict form; a job refuses a newer one.
PARAMETERS_VERSION = 2

#: What a permanent error leaving :func:`prepare_in_job` becomes: itself on a platform (no
#: Airflow there); in a process that runs Airflow tasks (``@task.pyspark``) also a failure
#: Airflow does not retry, set by the lease operator's module, which the job's DAG imports
#: (:func:`raise_permanent_errors_as`). The core imports nothing of Airflow.
_permanent_error: Callable[[PermanentError], BaseException] | None = None

_F = TypeVar("_F", bound=Callable[..., Any])


def raise_permanent_errors_as(make: Callable[[PermanentError], BaseException] | None) -> None:
    """:func:`prepare_in_job` raises ``make(error)`` for a permanent error from now on
    (None: the error itself)."""
    global _permanent_error
    _permanent_error = make


def _raising_permanent_errors(function: _F) -> _F:
    """``function``'s permanent errors leave as :func:`raise_permanent_errors_as` says."""

    @functools.wraps(function)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except PermanentError as exc:
            if _permanent_error is None:
                raise
            raise _permanent_error(exc) from exc

    return wrapped  # type: ignore[return-value]


@dataclass(frozen=True)
class JobParameters:
    """What one prepare job needs from the run, as the lease task hands it over: the
    export's :class:`~.export_spec.ExportSpec` (the same object spark-submit and Spark
    Connect prepare from) and the run's own values.

    ``prepared``: the batch already has its verdict (a rerun of a decided run): the job
    must write nothing, and :func:`prepare_in_job` returns at once.
    """

    export: ExportSpec
    transactional_ids: Sequence[str]
    job_label: str
    manifest: str
    prepared: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "transactional_ids", tuple(self.transactional_ids))

    @property
    def topic(self) -> str:
        """The export's first topic (its only one, without a topic column)."""
        return self.export.route.topic

    @property
    def transaction_timeout_ms(self) -> int:
        return self.export.transaction_timeout_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": PARAMETERS_VERSION,
            "export": self.export.to_dict(),
            "transactional_ids": list(self.transactional_ids),
            "job_label": self.job_label,
            "manifest": self.manifest,
            "prepared": self.prepared,
        }

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | str) -> JobParameters:
        """From the lease task's dict (or its JSON, as a job argument carries it), by the
        reader of its version."""
        data = dict(json.loads(values) if isinstance(values, str) else values)
        version = data.pop("version", None)
        reader = _READERS.get(version)  # type: ignore[arg-type]
        if reader is None:
            raise ConfigurationError(
                f"prepare job parameters of version {version!r}; this kafka2pc reads versions "
                f"{sorted(_READERS)}: install the same kafka2pc in the job as in Airflow"
            )
        try:
            return cls(**reader(data))
        except TypeError as exc:
            raise ConfigurationError(f"prepare job parameters are malformed: {exc}") from None


def _read_version_1(data: dict[str, Any]) -> dict[str, Any]:
    """Releases up to 0.2.0: one topic and the few options the lease task took."""
    spec = {
        name: data.pop(name)
        for name in (
            "topic",
            "transaction_timeout_ms",
            "key_column",
            "value_column",
            "header_columns",
            "align_with_kafka",
        )
        if name in data
    }
    return {**data, "export": ExportSpec(**spec)}


def _read_version_2(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "export": ExportSpec.from_dict(data.get("export") or {})}


_READERS = {1: _read_version_1, 2: _read_version_2}


@_raising_permanent_errors
def prepare_in_job(
    df: Any,
    parameters: JobParameters | Mapping[str, Any] | str,
    producer_config: Mapping[str, Any],
    *,
    registry: Mapping[str, Any] | None = None,
    progress_interval_s: float | None = None,
    writer: str | None = None,
    partitioning: str | None = None,
) -> Manifest | None:
    """Prepare ``df`` as the run's parameters say and write the manifest where they say.

    The export's options (topics or topic column, key, value, headers, registry formats,
    tombstones, timestamps, partitioning, writer) come from the parameters' spec, as the
    lease task was given them; ``progress_interval_s``, ``writer`` and ``partitioning``
    given here override it for this job. ``registry``: the schema registry's
    ``SchemaRegistryClient`` settings (``url``, ``basic.auth.user.info``, ``ssl.*``), needed
    with a registry format; like ``producer_config``, the job brings them from its
    platform's secret store.

    ``writer="auto"`` takes the JVM writer when the session's JVM loads the project's jar
    and kafka-clients (both are added to the session when the driver can fetch
    kafka-clients, or brought by the cluster: ``--jars``, ``--packages``), else the
    Python writer (always on Spark Connect); ``partitioning="auto"`` reads by the
    source's own splits where the plan pins them. The manifest says what was used.

    Call it once per run, from the job's driver (a classic or a Spark Connect session).
    On failure it raises and leaves the manifest unwritten: the record task then fails
    and the abort task fences the ids. A permanent error (a refusal of the input) is
    raised as itself; in an Airflow task (``@task.pyspark``) also as Airflow's no-retry
    failure, so the task's ``retries`` are not spent on it. None when the batch was
    already prepared.
    """
    from .cluster_packages import share_with_executors
    from .connect import is_connect
    from .prepare import prepare_export

    params = (
        parameters if isinstance(parameters, JobParameters) else JobParameters.from_dict(parameters)
    )
    if params.prepared:
        log.info("run %s: already prepared (it has its verdict); writing nothing", params.job_label)
        return None
    overrides = {
        "progress_interval_s": progress_interval_s,
        "writer": writer,
        "partitioning": partitioning,
    }
    spec = params.export.replace(**{k: v for k, v in overrides.items() if v is not None})
    if not is_connect(df.sparkSession):
        share_with_executors(df.sparkSession)  # a driver of standalone cluster deploy mode
    manifest = prepare_export(
        df,
        spec,
        transactional_ids=list(params.transactional_ids),
        producer_config=producer_config,
        registry=registry,
        job_label=params.job_label,
    )
    write_job_manifest(df.sparkSession, params.manifest, manifest)
    return manifest


def write_job_manifest(spark: Any, uri: str, manifest: Manifest) -> None:
    """Through Hadoop's FileSystem on a classic session (any URI the cluster reaches),
    from this process on Spark Connect (a local path, or fsspec)."""
    from .connect import is_connect, write_manifest

    if is_connect(spark):
        write_manifest(uri, manifest)
    else:
        from .app import write_manifest as write_through_hadoop

        write_through_hadoop(spark, uri, manifest)
