"""The prepare's Spark job on a Spark Connect server instead of spark-submit.

Same arguments, same manifest, same failure handling as the spark-submit path: the
operator builds the application's options, this runs them in the task's process on a
new Connect session (:mod:`..spark.remote`), and the operator reads the manifest back.
No JVM starts here; the Kafka settings never leave this process except as session
artifacts (:mod:`..spark.connect`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import Kafka2pcError, PrepareError
from ..hooks.kafka2pc import Kafka2pcHook
from ..hooks.spark_connect import Kafka2pcSparkConnectHook

log = logging.getLogger(__name__)


def prepare_on_connect(
    conn_id: str,
    kafka: Kafka2pcHook,
    args: Sequence[str],
    *,
    app_name: str,
    conf: Mapping[str, str] | None = None,
) -> None:
    """Run the prepare application with ``args`` on the Connect server of ``conn_id``.

    :raises Kafka2pcError: the prepare failed (a repair's refusal:
        :class:`~..spark.remote.RepairRefusedError`, its manifest written).
    """
    from ..spark.remote import prepare_remote

    settings = kafka.portable_settings()
    hook = Kafka2pcSparkConnectHook(conn_id)
    log.info("running the prepare on the Spark Connect server of connection %r", conn_id)
    try:
        with hook.session(app_name, conf) as spark:
            prepare_remote(spark, list(args), settings)
    except Kafka2pcError:
        raise
    except Exception as exc:  # gRPC / Spark errors: the server or the job failed
        raise PrepareError(
            f"the prepare on Spark Connect failed ({type(exc).__name__}: "
            f"{_first_line(exc)}); some partitions may hold open transactions"
        ) from exc


def _first_line(exc: Exception) -> Any:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else "no message"
