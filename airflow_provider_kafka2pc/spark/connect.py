"""What the prepare needs to run on a Spark Connect session, and nothing else.

On Connect the driver program is this (client) process; the DataFrame plan travels over
gRPC to a server whose executors write the transactions. Three things differ from a
classic session:

- **Kafka settings.** ``mapInArrow``'s function is cloudpickled *into the plan*, and the
  server shows the plan (abbreviated, bytes included) in its UI's Connect tab and its
  event log. So the plan carries only settings that are neither secret nor files
  (:func:`ship_settings`); the secrets travel as one JSON file and each file a setting
  names (TLS certificates and keys, a keytab) as itself, all as *session artifacts*
  (the AddArtifacts RPC, which is no part of the plan, is not logged and not shown in
  the UI). Each executor reads them from its session's files directory
  (:func:`executor_settings`). They live in the session's directory on the server and
  go with the session (``spark.stop()``). A server's operator can still read them, as
  any Spark cluster's operator can read what its executors use.
- **The key hash's jar.** ``ADD JAR`` would name a path on the client; the jar is
  uploaded as an artifact instead (:func:`add_jar`), which puts it on the session's
  class path; ``registerJavaFunction`` works on Connect from Spark 4.0.
- **The manifest.** No JVM of ours to write through Hadoop's FileSystem: this process
  writes it (:func:`write_manifest`), locally or through fsspec.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from ..connection.settings import is_secret
from ..errors import ConfigurationError, Kafka2pcError
from ..transaction.manifest import Manifest

#: PySpark's process-wide switch to Spark Connect (read by ``pyspark.sql.utils.is_remote``).
CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"
#: The setting (never sent to Kafka) naming the artifact that holds the secret settings.
SETTINGS_ARTIFACT = "kafka2pc.connect.settings.artifact"
#: The setting (never sent to Kafka) mapping file settings to their artifacts' names.
FILE_ARTIFACTS = "kafka2pc.connect.file.artifacts"
#: Settings that name a file the Kafka client reads: shipped as artifacts when the file
#: exists here (a path that exists only on the server's nodes is passed as it is).
FILE_SETTINGS = (
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.crl.location",
    "ssl.keystore.location",
    "sasl.kerberos.keytab",
)


def is_connect(spark: Any) -> bool:
    """True when ``spark`` is a Spark Connect session (a client of a remote server)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


@contextmanager
def remote_session(url: str, app_name: str, conf: Mapping[str, str] | None = None) -> Iterator[Any]:
    """A new session on the Connect server at ``url`` (``sc://host:port/;params``), stopped
    (released on the server, its artifacts removed) on leaving.

    ``conf`` is applied as the session's runtime settings; settings the server fixes at
    start (static ones) are ignored by PySpark, as for any Connect session.

    PySpark switches the whole process to Connect (``SPARK_CONNECT_MODE_ENABLED``, which
    ``pyspark.sql.functions`` dispatch on) and never switches it back: a classic session
    in the same process afterwards (``dag.test()``, ``@task.pyspark`` in one interpreter)
    would fail. The switch is undone on leaving.
    """
    from pyspark.sql import SparkSession

    if not url.startswith("sc://"):
        shown = url.split(";")[0]  # the parameters may hold a token
        raise ConfigurationError(f"a Spark Connect URL starts with sc://, got {shown!r}")
    mode = os.environ.get(CONNECT_MODE)
    builder = SparkSession.builder.remote(url).appName(app_name)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    try:
        spark = builder.create()
        _bound_retries(spark)
        try:
            yield spark
        finally:
            with suppress(Exception):  # the server is gone: nothing left to release
                spark.stop()
    finally:
        if mode is None:
            os.environ.pop(CONNECT_MODE, None)
        else:
            os.environ[CONNECT_MODE] = mode


#: How long the client keeps retrying a server it lost: the backoff 0.05, 0.2, 0.8, 3.2, then
#: 10 s (plus up to 0.5 s of jitter each from 3.2 s on) for 8 retries, about 45 s. PySpark's
#: default (15 retries up to 60 s apart) is at least 10 minutes, made for servers that
#: restart under a client that can start over. A prepare cannot: its session, artifacts
#: and execution live in the server's memory, and a restarted server has none of them; a
#: wait helps only while a server that is still running is unreachable (a proxy or a load
#: balancer that drops the connection), and the execution it keeps is reattached. The
#: window is short beside the transactions' timeout (15 min by default), which is the hard
#: bound (the broker aborts them then), because open transactions hold back
#: read_committed consumers until the abort task fences them (docs/spark-connect.md).
RETRIES, MAX_BACKOFF_MS = 8, 10_000


def _bound_retries(spark: Any) -> None:
    from .connect_retries import LostServerPolicy

    spark.client.set_retry_policies([LostServerPolicy(RETRIES, MAX_BACKOFF_MS)])


def ship_settings(spark: Any, config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings to put in the plan: ``config`` without secrets and local files, plus
    the names of the artifacts that carry them (uploaded here to ``spark``'s session)."""
    public: dict[str, Any] = {}
    private: dict[str, Any] = {}
    files: dict[str, str] = {}
    staging = Path(tempfile.mkdtemp(prefix="kafka2pc-connect-"))  # mode 0700
    try:
        tag = uuid.uuid4().hex
        for key, value in config.items():
            if key in FILE_SETTINGS and isinstance(value, str) and Path(value).is_file():
                name = f"kafka2pc-{tag}-{key.replace('.', '-')}{Path(value).suffix}"
                shutil.copyfile(value, staging / name)
                os.chmod(staging / name, 0o600)
                spark.addArtifacts(str(staging / name), file=True)
                files[key] = name
            elif is_secret(key):
                private[key] = value
            else:
                public[key] = value
        if private:
            name = f"kafka2pc-{tag}-settings.json"
            fd = os.open(staging / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                json.dump(private, handle)
            spark.addArtifacts(str(staging / name), file=True)
            public[SETTINGS_ARTIFACT] = name
        if files:
            public[FILE_ARTIFACTS] = files
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return public


def executor_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """On an executor: the settings :func:`ship_settings` split, whole again (a no-op for
    settings that were not shipped)."""
    settings = dict(config)
    secrets = settings.pop(SETTINGS_ARTIFACT, None)
    files = settings.pop(FILE_ARTIFACTS, None)
    if secrets is None and not files:
        return settings
    from pyspark import SparkFiles

    if secrets is not None:
        try:
            settings.update(json.loads(Path(SparkFiles.get(secrets)).read_text()))
        except OSError as exc:
            raise Kafka2pcError(
                f"the Kafka settings shipped to this executor are missing ({exc.strerror}); "
                "was the session released while the prepare ran?"
            ) from None
    for key, name in (files or {}).items():
        settings[key] = SparkFiles.get(name)
    return settings


def add_jar(spark: Any, jar: Path) -> None:
    """Put ``jar`` on the session's class path: uploaded on Connect, ``ADD JAR`` otherwise."""
    if is_connect(spark):
        spark.addArtifacts(str(jar))
    else:
        quoted = str(jar).replace("'", "\\'")
        spark.sql(f"ADD JAR '{quoted}'")


def write_manifest(uri: str, manifest: Manifest) -> None:
    """Write ``manifest`` from this process: a local path atomically (temporary file, then
    rename), any other URI through fsspec (s3://, gs://, abfs://, ... with its filesystem)."""
    text = manifest.to_json()
    local = _local(uri)
    if local is not None:
        local.parent.mkdir(parents=True, exist_ok=True)
        partial = local.with_name(local.name + ".inprogress")
        partial.write_text(text)
        os.replace(partial, local)
        return
    try:
        import fsspec
    except ImportError:
        raise ConfigurationError(
            f"writing the manifest to {uri} needs fsspec and its filesystem for that scheme"
        ) from None
    with fsspec.open(uri, "w") as handle:
        handle.write(text)


def _local(uri: str) -> Path | None:
    if uri.startswith("file://"):
        return Path(uri[len("file://") :])
    return Path(uri) if "://" not in uri else None
