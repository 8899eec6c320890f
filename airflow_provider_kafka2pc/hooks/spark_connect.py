"""The Spark provider's ``spark_connect`` connection, as the prepare uses it.

The official :class:`SparkConnectHook` builds the ``sc://`` URL (host, port, user id,
token, ``use_ssl``); this subclass only opens a session on it for one prepare and says
whether a connection is of that type, which is how the prepare chooses its path; and
runs the prepare application on such a session (:func:`prepare_on_connect`, called by
:class:`~.spark_job.SparkJobHook` for the prepare and for a loss repair alike).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

from ..errors import ConfigurationError, Kafka2pcError, PrepareError
from ..spark.connect import remote_session
from ..spark.failure import job_message
from ..utils.connections import require_connection

if TYPE_CHECKING:
    from ..spark.export_spec import ExportSpec
    from .kafka2pc import Kafka2pcHook

log = logging.getLogger(__name__)

#: Values of the prepare's ``spark_mode``: how the prepare reaches Spark.
SUBMIT, CONNECT = "submit", "connect"
SPARK_MODES = (SUBMIT, CONNECT)


def spark_mode(conn_id: str, explicit: str | None = None) -> str:
    """:data:`CONNECT` for a ``spark_connect`` connection, else :data:`SUBMIT`; an explicit
    mode wins (e.g. a ``generic`` connection whose host is an ``sc://`` URL)."""
    if explicit is not None:
        if explicit not in SPARK_MODES:
            raise ConfigurationError(f"spark_mode must be one of {SPARK_MODES}, got {explicit!r}")
        return explicit
    conn = require_connection("Spark", conn_id)
    return CONNECT if conn.conn_type == SparkConnectHook.conn_type else SUBMIT


class Kafka2pcSparkConnectHook(SparkConnectHook):
    """Sessions on the Spark Connect server of a ``spark_connect`` connection.

    :param conn_id: the ``spark_connect`` connection (host, port; login = user id,
        password = token; extra ``use_ssl``).
    """

    hook_name = "Spark Connect (two-phase commit prepare)"

    def url(self) -> str:
        """The ``sc://`` URL; it may hold the token: never log it."""
        require_connection("Spark", self._conn_id)
        try:
            return self.get_connection_url()
        except ValueError as exc:
            raise ConfigurationError(f"Spark Connect connection {self._conn_id!r}: {exc}") from None

    @contextmanager
    def session(self, app_name: str, conf: Mapping[str, str] | None = None) -> Iterator[Any]:
        """A new session for one prepare, released (artifacts removed) on leaving."""
        with remote_session(self.url(), app_name, conf) as spark:
            yield spark


def prepare_on_connect(
    conn_id: str,
    kafka: Kafka2pcHook,
    spec: ExportSpec,
    *,
    app_name: str,
    conf: Mapping[str, str] | None = None,
    registry: Mapping[str, Any] | None = None,
    **run: Any,
) -> None:
    """Run the prepare of ``spec`` on the Connect server of ``conn_id``: the same spec and
    manifest as spark-submit; no JVM starts here, and the Kafka settings leave this process
    only as session artifacts (:mod:`..spark.connect`).

    :param registry: the schema registry's settings, with a registry format.
    :param run: the run's own values (:func:`~..spark.remote.prepare_remote`: ids,
        manifest, job label, repair).
    :raises Kafka2pcError: the prepare failed (a repair's refusal:
        :class:`~..spark.remote.RepairRefusedError`, its manifest written).
    """
    from ..spark.remote import prepare_remote

    settings = kafka.portable_settings()
    hook = Kafka2pcSparkConnectHook(conn_id)
    log.info("running the prepare on the Spark Connect server of connection %r", conn_id)
    try:
        with hook.session(app_name, conf) as spark:
            prepare_remote(spark, spec, producer_config=settings, registry=registry, **run)
    except Kafka2pcError:
        raise
    except Exception as exc:  # gRPC / Spark errors: the server or the job failed
        raise PrepareError(
            f"the prepare on Spark Connect failed ({type(exc).__name__}: "
            f"{job_message(exc)}); some partitions may hold open transactions"
        ) from exc
