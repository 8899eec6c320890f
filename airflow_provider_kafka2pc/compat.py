"""The upstream private members this provider relies on, in one place.

Each was read from the provider versions that ``pyproject.toml`` bounds (Airflow's own
providers keep such reliances in a ``version_compat`` module the same way); a major
release of either provider must be checked against this file before the bound moves.
"""

from __future__ import annotations

import contextlib
import urllib.error
import urllib.request
from typing import Any

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook
from airflow.providers.apache.spark.hooks.spark_submit import (
    _K8S_WAIT_APP_COMPLETION_CONF as K8S_WAIT_APP_COMPLETION_CONF,
)
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from .errors import ConfigurationError


def kafka_client_config(hook: KafkaBaseHook) -> dict[str, Any]:
    """The ``kafka`` connection's client settings with callbacks resolved, exactly as the
    official hooks build them (apache-airflow-providers-apache-kafka 2.x,
    ``KafkaBaseHook._build_config``)."""
    return hook._build_config()


#: The ``SparkSubmitOperator`` arguments the 6.x operator keeps private (it does not
#: template them) and passes to its ``SparkSubmitHook``: read, never set, by the prepare.
_PRIVATE_SUBMIT_ARGUMENTS = {
    "archives": "_archives",
    "java_class": "_java_class",
    "repositories": "_repositories",
    "total_executor_cores": "_total_executor_cores",
    "executor_cores": "_executor_cores",
    "executor_memory": "_executor_memory",
    "driver_memory": "_driver_memory",
    "num_executors": "_num_executors",
    "status_poll_interval": "_status_poll_interval",
    "verbose": "_verbose",
    "spark_binary": "_spark_binary",
    "yarn_queue": "_yarn_queue",
    "deploy_mode": "_deploy_mode",
    "use_krb5ccache": "_use_krb5ccache",
    "track_driver_via_k8s_api": "_track_driver_via_k8s_api",
    "yarn_track_via_rm_api": "_yarn_track_via_rm_api",
}


def submit_arguments(operator: SparkSubmitOperator) -> dict[str, Any]:
    """The spark-submit arguments the operator was given and keeps private
    (apache-airflow-providers-apache-spark 6.x, ``SparkSubmitOperator._get_hook``), by the
    name ``SparkSubmitHook`` takes them under; read only."""
    return {name: getattr(operator, attr, None) for name, attr in _PRIVATE_SUBMIT_ARGUMENTS.items()}


def yarn_rm_auth(operator: SparkSubmitOperator) -> Any:
    """The operator's ``yarn_rm_auth`` (a credential object: used at run time, never recorded)."""
    return getattr(operator, "_yarn_rm_auth", None)


def openlineage_injection(operator: SparkSubmitOperator) -> tuple[bool, bool]:
    """(inject parent job info, inject transport info), as the operator was given them."""
    return (
        bool(getattr(operator, "_openlineage_inject_parent_job_info", False)),
        bool(getattr(operator, "_openlineage_inject_transport_info", False)),
    )


def tracks_standalone_driver(hook: SparkSubmitHook) -> bool:
    """The hook submits to a Spark standalone master in cluster deploy mode: its driver
    runs on a worker and is tracked by its id (6.x, ``_should_track_driver_status``)."""
    return bool(hook._should_track_driver_status)


def driver_id(hook: SparkSubmitHook) -> str | None:
    """The id of the driver a standalone cluster-mode submission started (6.x, ``_driver_id``)."""
    return hook._driver_id


def submit_and_wait(hook: SparkSubmitHook, application: str) -> None:
    """Run spark-submit and wait for the application to finish, in every deploy mode, as
    ``SparkSubmitOperator.execute`` does with ``durable=False``
    (apache-airflow-providers-apache-spark 6.x: in cluster modes ``submit`` returns once the
    driver is submitted; the operator's backends then track it with these members)."""
    if hook._should_track_driver_status:  # standalone cluster mode
        _check_rest_endpoint(_status_endpoint(hook._connection))
        hook._driver_id = hook.submit(application)
        try:
            try:
                hook._start_driver_status_tracking()
            except Exception:  # re-raised below, after the driver is stopped
                with contextlib.suppress(Exception):  # best effort: an untracked driver
                    hook.on_kill()  # must not write on
                raise
            if hook._driver_status != "FINISHED":
                raise RuntimeError(
                    f"Driver {hook._driver_id} exited with status {hook._driver_status}"
                )
        finally:
            hook._run_post_submit_commands()
        return
    if hook._should_track_driver_via_k8s_api():
        hook._validate_track_driver_via_k8s_api_config()
        hook._conf[K8S_WAIT_APP_COMPLETION_CONF] = "false"
        hook.submit(application)
        hook._poll_k8s_driver_via_api()
        return
    if hook._is_yarn_cluster_mode and hook._yarn_track_via_rm_api:
        hook._validate_yarn_track_via_rm_api_config()
        hook.submit(application)
        try:
            hook._start_yarn_application_status_tracking(hook._yarn_application_id)
        finally:
            hook._run_post_submit_commands()
        return
    hook.submit(application)


def _status_endpoint(connection: dict[str, Any]) -> str:
    """The master's REST server, where the hook polls a standalone cluster-mode driver.

    6.3.4 polls ``rest_endpoint`` (a ``spark`` connection with one master); 6.3.0 to 6.3.3
    only a master given by its REST port (``:6066``). Otherwise the hook polls with
    ``spark-submit --status``, which Spark sends to the REST server at the master's RPC
    address: it never answers (apache/airflow#71881), so it is refused here.
    """
    master = str(connection["master"])
    endpoint = connection.get("rest_endpoint")
    if endpoint is None and "rest_endpoint" not in connection and master.endswith(":6066"):
        endpoint = master.replace("spark://", "http://", 1)
    if endpoint is None:
        raise ConfigurationError(
            f"the Spark provider would poll the cluster-mode driver on {master} with "
            "spark-submit --status, which no standalone master answers "
            "(apache/airflow#71881), so nothing was submitted: use a spark connection "
            "with one master and apache-airflow-providers-apache-spark 6.3.4 or later"
        )
    return str(endpoint)


def _check_rest_endpoint(endpoint: str, timeout_s: float = 30) -> None:
    """Refuse before submitting when the standalone master's REST server, where the hook
    polls a cluster-mode driver's status, does not answer. Why: otherwise the task fails
    after ten missed polls while the driver, submitted, goes on writing transactions
    nobody decides."""
    url = f"{endpoint}/v1/submissions/status/kafka2pc-check"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s):
            return
    except urllib.error.HTTPError:
        return  # it answered
    except OSError as exc:
        raise ConfigurationError(
            f"the Spark master's REST server {endpoint} does not answer ({exc}); in cluster "
            "deploy mode the driver's status is polled there, so nothing was submitted: "
            "turn it on at the master (spark.master.rest.enabled=true, off by default) and "
            "give its port as the spark connection's rest-port extra (default 6066)"
        ) from exc
