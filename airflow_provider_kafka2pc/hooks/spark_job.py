"""Runs the prepare's Spark job (:class:`~..spark.job_spec.SparkJob`): the prepare itself,
and a loss repair's re-prepare of the lost partitions from the source.

One hook for both, on either path: spark-submit of the packaged application (composing the
Spark provider's :class:`SparkSubmitHook`, built afresh for each run) or the same
application on a Spark Connect session (:class:`~.spark_connect.Kafka2pcSparkConnectHook`).
Credentials are read from the connections here, at run time: Kafka's and the registry's
reach spark-submit in private files (``--kafka-config-file``), never on its command line.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseHook

from .. import compat, defaults
from ..errors import (
    CommittableError,
    ConfigurationError,
    Kafka2pcError,
    RepairFailedError,
    RepairImpossibleError,
)
from ..ledger import Batch, Participant
from ..spark import APPLICATION, PROJECT_JAR
from ..spark.class_sharing import driver_archive
from ..spark.compilation import with_compile_thresholds
from ..spark.failure import JobFailure, failure_uri
from ..spark.job import (
    Repair,
    local_path,
    private_config_file,
    repair_argv,
    repair_of,
    repaired_committables,
    spark_submit_binary,
    with_project_jar,
)
from ..spark.job_spec import SparkJob
from ..transaction.committable import Committable
from ..transaction.manifest import Manifest
from ..version_compat import AirflowException, AirflowNotFoundException
from .kafka2pc import Kafka2pcHook
from .registry import SchemaRegistryHook
from .spark_connect import CONNECT, prepare_on_connect, spark_mode

#: Spark's JVM main class that runs a Python application (a driver in standalone cluster
#: mode, where spark-submit takes no Python file).
PYTHON_RUNNER = "org.apache.spark.deploy.PythonRunner"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


class SparkJobHook(BaseHook):
    """Run one :class:`SparkJob` for a batch: :meth:`prepare`, or :meth:`reprepare` the
    lost partitions.

    :param job: the job (built by the prepare operator, or read back from the ledger).
    :param kafka: the Kafka hook to use; default: one on ``job.kafka_conn_id``.
    :param yarn_rm_auth: the operator's ``yarn_rm_auth`` (a credential: never recorded).
    """

    hook_name = "Spark job (two-phase commit prepare)"

    def __init__(
        self,
        job: SparkJob,
        *,
        kafka: Kafka2pcHook | None = None,
        yarn_rm_auth: Any = None,
    ) -> None:
        super().__init__()
        self.job = job
        self.kafka = kafka or Kafka2pcHook(job.kafka_conn_id)
        self.yarn_rm_auth = yarn_rm_auth
        #: What spark-submit runs: the packaged prepare application.
        self.application = APPLICATION
        self._running: SparkSubmitHook | None = None

    # -- the two runs -------------------------------------------------------------------

    def prepare(self, batch: Batch) -> Manifest:
        """The prepare: every partition written into its own open transaction."""
        with self._manifest(batch, f"attempt-{batch.attempt}") as (manifest, read):
            self.run(batch, manifest)
            return _read_manifest(manifest, read)

    def reprepare(
        self, batch: Batch, participants: Sequence[Participant], lost: Sequence[Participant]
    ) -> dict[int, Committable]:
        """Write the ``lost`` partitions again, each under its own id, from the same input.

        The whole input is partitioned as at the prepare; the application refuses (writes
        nothing) unless every partition holds the rows its participant recorded.

        :raises RepairImpossibleError: the source changed or is gone.
        :raises RepairFailedError: the job failed otherwise; a retry may succeed.
        """
        label = batch.key
        names = ", ".join(
            f"partition {p.index} ({p.transactional_id}, {p.committable.record_count} rows)"
            for p in lost
        )
        job = self.job
        path = job.source.get("path")
        local = local_path(str(path)) if path else None
        if local is not None and not local.exists() and not self._reads_remotely():
            raise RepairImpossibleError(f"the source path {str(path)!r} is gone")
        repair = repair_of(participants, lost, batch.partitioning, batch.source_splits)
        if job.withheld:
            self.log.warning(
                "%s: the recorded Spark job left out %s (named like secrets): the re-prepare "
                "runs without them",
                label,
                list(job.withheld),
            )
        self.log.warning("%s: re-preparing %s with the prepare's Spark job", label, names)
        started = time.monotonic()
        name = f"attempt-{batch.attempt}-repair-{time.time_ns()}"
        with self._manifest(batch, name) as (manifest, read):
            try:
                self.run(batch, manifest, repair, job_suffix="-repair")
            except (AirflowException, Kafka2pcError) as exc:
                refusal = _refusal(read)
                if refusal is not None:
                    raise RepairImpossibleError(refusal) from exc
                self._fence([p.transactional_id for p in lost])
                raise RepairFailedError(
                    f"{label}: re-preparing {names} failed ({exc}); they stay LOST and the "
                    "batch COMMIT_DECIDED: a retry of the commit task re-prepares them"
                ) from exc
            prepared = _read_manifest(manifest, read)
        fresh = repaired_committables(prepared, batch, lost)
        expiry = [e for c in fresh.values() if (e := c.expires_at_ms) is not None]
        self.log.info(
            "%s: re-prepared %d rows in %d partitions in %.1f s; earliest timeout in %s",
            label,
            prepared.source_rows,
            len(fresh),
            time.monotonic() - started,
            f"{min(expiry) / 1000 - time.time():.1f} s" if expiry else "never (2PC)",
        )
        return fresh

    def on_kill(self) -> None:
        """Stop the spark-submit this hook runs (the task was killed)."""
        if self._running is not None:
            self._running.on_kill()

    # -- one run of the application -----------------------------------------------------

    def run(
        self, batch: Batch, manifest: str, repair: Repair | None = None, job_suffix: str = ""
    ) -> None:
        """One run of the job's export spec for ``batch`` (``repair``: its loss repair):
        spark-submit of the packaged application, or a Spark Connect session on a
        ``spark_connect`` connection.

        :raises Kafka2pcError: the job's own error, of its class and with its words, where
            the job wrote one (:mod:`..spark.failure`); a permanent one fails the task
            without a retry.
        """
        job = self.job
        label = batch.key.job_label(batch.attempt, job_suffix)
        if self.on_connect():
            prepare_on_connect(
                job.spark_conn_id,
                self.kafka,
                job.export,
                app_name=f"{job.name}{job_suffix}",
                conf=job.conf_dict(),
                registry=self._registry_settings(),
                transactional_ids=list(batch.transactional_ids),
                manifest=manifest,
                job_label=label,
                repair=repair,
            )
            return
        with (
            private_config_file(job.export.to_dict(), "export.json") as spec_path,
            self.kafka.config_file() as config_path,
            self._registry_file() as registry_path,
        ):
            application_args = [
                "--spec-file",
                str(spec_path),
                *(["--registry-config-file", str(registry_path)] if registry_path else []),
                "--transactional-ids",
                ",".join(batch.transactional_ids),
                "--kafka-config-file",
                str(config_path),
                "--manifest",
                manifest,
                "--job-label",
                label,
                *repair_argv(repair),
            ]
            _remove(failure_uri(manifest))  # an earlier try's, under a manifest_dir
            try:
                self._submit(application_args)
            except (AirflowException, RuntimeError) as exc:
                failure = _failure(manifest)
                if failure is None:
                    raise
                raise failure.exception(self._where_the_log_is()) from exc

    def _submit(self, application_args: list[str]) -> None:
        """spark-submit of the application with ``application_args``, waited for."""
        job = self.job
        conf = with_project_jar(
            defaults.spark_conf(job.conf_dict()), job.writer, protobuf=job.export.uses_protobuf
        )
        extra = spark_extra(job.spark_conn_id)
        submit = job.submit_dict()
        binary = submit.get("spark_binary") or extra.get("spark-binary") or spark_submit_binary()
        deploy_mode = submit.get("deploy_mode") or extra.get("deploy-mode")
        properties_file = submit.get("properties_file")
        conf = with_compile_thresholds(conf, binary, properties_file)
        with driver_archive(
            conf, binary, deploy_mode=deploy_mode, properties_file=properties_file
        ) as archive:
            # A fresh hook per run: it is built from this run's arguments.
            self._running = self.submit_hook(application_args, archive.conf)
            primary = self.application
            if compat.tracks_standalone_driver(self._running):
                primary = PROJECT_JAR  # the driver's jar: PYTHON_RUNNER runs the application
            compat.submit_and_wait(self._running, primary)
            archive.publish()

    def _where_the_log_is(self) -> str:
        """Where a failed run's log is: spark-submit's output above, or, for a driver on a
        standalone worker (cluster deploy mode), that driver's directory on the worker."""
        running = self._running
        if running is not None and compat.tracks_standalone_driver(running):
            return (
                f" (raised by the Spark job, driver {compat.driver_id(running)}; its log is in "
                "that driver's directory on the Spark worker that ran it)"
            )
        return " (raised by the Spark job; its log is above)"

    def submit_hook(self, application_args: list[str], conf: dict[str, str]) -> SparkSubmitHook:
        """The Spark provider's hook for one spark-submit of the application, built afresh.

        :param conf: its Spark settings (:meth:`run`'s: the job's, the project's jar, the
            driver archive's options).
        """
        job = self.job
        submit = job.submit_dict()
        if submit.get("spark_binary") is None and "spark-binary" not in spark_extra(
            job.spark_conn_id
        ):
            submit["spark_binary"] = spark_submit_binary()

        def build(args: list[str], **more: Any) -> SparkSubmitHook:
            return SparkSubmitHook(
                conf=conf,
                conn_id=job.spark_conn_id,
                name=job.name,
                application_args=args,
                env_vars=job.env_dict() or None,
                yarn_rm_auth=self.yarn_rm_auth,
                **{**submit, **more},
            )

        hook = build(application_args)
        if not compat.tracks_standalone_driver(hook):
            return hook
        # Standalone cluster mode: spark-submit refuses a Python application there ("not
        # supported for python applications on standalone clusters"), not a JVM main
        # class; Spark's own runner of Python applications is one (its arguments: the
        # file, the extra Python files, then the application's).
        return build([self.application, "", *application_args], java_class=PYTHON_RUNNER)

    def on_connect(self) -> bool:
        return spark_mode(self.job.spark_conn_id, self.job.spark_mode) == CONNECT

    def _reads_remotely(self) -> bool:
        """The source's paths are a Connect server's, not this machine's. Without a Spark
        connection they are ours: the missing path is the first thing to say."""
        try:
            return self.on_connect()
        except ConfigurationError:
            return False

    def _fence(self, transactional_ids: Sequence[str]) -> None:
        """Abort whatever a failed repair job left open under these ids (best effort)."""
        try:
            with self.kafka.controller() as controller:
                for tid in transactional_ids:
                    controller.fence(tid)
        except Kafka2pcError as exc:
            self.log.error(
                "could not fence %s after the failed repair (%s); what it left open ends at "
                "its transaction timeout",
                list(transactional_ids),
                exc,
            )

    def _registry_settings(self) -> dict[str, Any] | None:
        """The registry's client settings, when a registry format is asked (in memory:
        the Connect prepare's driver is this process)."""
        if self.job.registry_conn_id is None:
            return None
        return SchemaRegistryHook(self.job.registry_conn_id).settings()

    @contextmanager
    def _registry_file(self) -> Iterator[Path | None]:
        """The registry's settings in a private file, when a registry format is asked."""
        if self.job.registry_conn_id is None:
            yield None
            return
        with SchemaRegistryHook(self.job.registry_conn_id).config_file() as path:
            yield path

    @contextmanager
    def _manifest(self, batch: Batch, name: str) -> Iterator[tuple[str, Any]]:
        """(where the job writes the manifest, how to read it back)."""
        manifest_dir = self.job.manifest_dir
        if manifest_dir:
            uri = (
                f"{manifest_dir.rstrip('/')}/{_safe(batch.export_id)}/{_safe(batch.run_key)}"
                f"/{name}.json"
            )
            local = local_path(uri)
            if local is not None:
                local.parent.mkdir(parents=True, exist_ok=True)
            yield uri, lambda: _read_text(uri)
            return
        with tempfile.TemporaryDirectory(prefix="kafka2pc-manifest-") as directory:
            path = Path(directory) / "manifest.json"
            yield str(path), path.read_text


def _read_manifest(manifest: str, read: Any) -> Manifest:
    try:
        return Manifest.from_json(read())
    except (OSError, CommittableError) as exc:
        raise Kafka2pcError(f"the prepare job's manifest {manifest} is unusable: {exc}") from exc


def _failure(manifest: str) -> JobFailure | None:
    """The error the job wrote beside ``manifest`` before it failed, if any."""
    try:
        return JobFailure.from_json(_read_text(failure_uri(manifest)))
    except (OSError, ValueError):
        return None


def _remove(uri: str) -> None:
    """Remove ``uri`` where it exists (a stale failure must not be raised for a new run)."""
    local = local_path(uri)
    try:
        if local is not None:
            local.unlink(missing_ok=True)
        else:
            from airflow.sdk import ObjectStoragePath

            path = ObjectStoragePath(uri)
            if path.exists():
                path.unlink()
    except OSError:  # unreadable storage: the job's own write will say so
        pass


def _read_text(uri: str) -> str:
    local = local_path(uri)
    if local is not None:
        return local.read_text()
    from airflow.sdk import ObjectStoragePath

    return ObjectStoragePath(uri).read_text()


def _refusal(read: Any) -> str | None:
    """Why a failed repair run refused to write, when its manifest says so; else None."""
    try:
        refused = Manifest.from_json(read()).metadata.get("refused")
    except (OSError, CommittableError):
        return None
    return str(refused) if refused else None


def spark_extra(conn_id: str) -> dict[str, Any]:
    try:
        return BaseHook.get_connection(conn_id).extra_dejson
    except AirflowNotFoundException:
        return {}
