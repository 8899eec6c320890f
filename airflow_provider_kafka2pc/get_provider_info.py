"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-kafka2pc",
        "name": "Kafka two-phase commit",
        "description": "Exactly-once export from Spark into Apache Kafka by two-phase commit.",
        "versions": ["0.1.0"],
    }
