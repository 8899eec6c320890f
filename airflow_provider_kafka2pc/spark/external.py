"""The prepare inside a PySpark job that another operator launches: the contract.

When the Spark job is started by something other than the prepare operator (Databricks,
EMR, Dataproc, the Kubernetes Spark operator, ``@task.pyspark``), the export splits the
prepare operator's work in three: a *lease* task (validate, lease the ids, fence them)
hands the run's parameters to the job; the user's script reads its source and calls
:func:`prepare_in_job`, which writes one open transaction per partition and the manifest;
a *record* task reads the manifest into the ledger. Decide, commit and abort follow as
in every export. The parameters hold no secret: the script brings the Kafka settings from
its platform's secret store.

    from airflow_provider_kafka2pc.spark.external import prepare_in_job

    def main(spark, parameters):           # parameters: the lease task's XCom (a dict)
        df = spark.read.parquet("s3://bucket/orders/day=...")
        prepare_in_job(df, parameters, producer_config={"bootstrap.servers": ..., ...})
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import defaults
from ..errors import ConfigurationError
from ..transaction.manifest import Manifest

log = logging.getLogger(__name__)

#: The version of :class:`JobParameters`' dict form; a job refuses any other.
PARAMETERS_VERSION = 1


@dataclass(frozen=True)
class JobParameters:
    """What one prepare job needs from the run, as the lease task hands it over.

    ``prepared``: the batch already has its verdict (a rerun of a decided run): the job
    must write nothing, and :func:`prepare_in_job` returns at once.
    """

    topic: str
    transactional_ids: Sequence[str]
    job_label: str
    manifest: str
    transaction_timeout_ms: int = defaults.TRANSACTION_TIMEOUT_MS
    key_column: str | None = None
    value_column: str | None = None
    header_columns: Sequence[str] = field(default_factory=tuple)
    align_with_kafka: bool = True
    prepared: bool = False

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["transactional_ids"] = list(self.transactional_ids)
        values["header_columns"] = list(self.header_columns)
        return {"version": PARAMETERS_VERSION, **values}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | str) -> JobParameters:
        """From the lease task's dict (or its JSON, as a job argument carries it)."""
        data = dict(json.loads(values) if isinstance(values, str) else values)
        version = data.pop("version", None)
        if version != PARAMETERS_VERSION:
            raise ConfigurationError(
                f"prepare job parameters of version {version!r}; this kafka2pc reads version "
                f"{PARAMETERS_VERSION}: install the same kafka2pc in the job as in Airflow"
            )
        for name in ("transactional_ids", "header_columns"):
            if isinstance(data.get(name), list):
                data[name] = tuple(data[name])
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigurationError(f"prepare job parameters are malformed: {exc}") from None


def prepare_in_job(
    df: Any,
    parameters: JobParameters | Mapping[str, Any] | str,
    producer_config: Mapping[str, Any],
    *,
    progress_interval_s: float | None = defaults.PROGRESS_INTERVAL_S,
    writer: str = "auto",
    partitioning: str | None = "auto",
) -> Manifest | None:
    """Prepare ``df`` as the run's parameters say and write the manifest where they say.

    ``writer="auto"`` takes the JVM writer when the session's JVM loads the project's jar
    and kafka-clients (both are added to the session when the driver can fetch
    kafka-clients, or brought by the cluster: ``--jars``, ``--packages``), else the
    Python writer (always on Spark Connect); ``partitioning="auto"`` reads by the
    source's own splits where the plan pins them. The manifest says what was used.

    Call it once per run, from the job's driver (a classic or a Spark Connect session).
    On failure it raises and leaves the manifest unwritten: the record task then fails
    and the abort task fences the ids. None when the batch was already prepared.
    """
    from .prepare import prepare_dataframe

    params = (
        parameters if isinstance(parameters, JobParameters) else JobParameters.from_dict(parameters)
    )
    if params.prepared:
        log.info("run %s: already prepared (it has its verdict); writing nothing", params.job_label)
        return None
    manifest = prepare_dataframe(
        df,
        topic=params.topic,
        transactional_ids=list(params.transactional_ids),
        producer_config=producer_config,
        key_column=params.key_column,
        value_column=params.value_column,
        header_columns=list(params.header_columns),
        transaction_timeout_ms=params.transaction_timeout_ms,
        job_label=params.job_label,
        progress_interval_s=progress_interval_s,
        align_with_kafka=params.align_with_kafka,
        writer=writer,
        partitioning=partitioning,
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
