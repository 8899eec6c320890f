"""The upstream private members this provider relies on, in one place.

Each was read from the provider versions that ``pyproject.toml`` bounds (Airflow's own
providers keep such reliances in a ``version_compat`` module the same way); a major
release of either provider must be checked against this file before the bound moves.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator


def kafka_client_config(hook: KafkaBaseHook) -> dict[str, Any]:
    """The ``kafka`` connection's client settings with callbacks resolved, exactly as the
    official hooks build them (apache-airflow-providers-apache-kafka 2.x,
    ``KafkaBaseHook._build_config``)."""
    return hook._build_config()


def spark_binary(operator: SparkSubmitOperator) -> str | None:
    """The ``spark_binary`` argument the operator was given (apache-airflow-providers-apache-
    spark 6.x keeps it as ``_spark_binary``)."""
    return operator._spark_binary


def submit_with(operator: SparkSubmitOperator, binary: str | None) -> None:
    """Make the operator's next ``execute`` build a fresh hook (with ``binary`` as its
    spark-submit): the hook is built from the operator's arguments, which we set per submit
    (apache-airflow-providers-apache-spark 6.x: ``_spark_binary``, ``_hook``)."""
    operator._spark_binary = binary
    operator._hook = None
