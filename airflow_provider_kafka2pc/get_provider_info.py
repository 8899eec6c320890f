"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point.

No connection type of our own: Kafka settings come from the official Kafka provider's
``kafka`` connection, Spark's from the ``spark`` connection, the ledger's from a
``postgres`` or ``sqlite`` one.
"""

from __future__ import annotations

from typing import Any

from . import __version__

INTEGRATION = "Kafka two-phase commit"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-kafka2pc",
        "name": "Kafka two-phase commit",
        "description": "Exactly-once export from Spark into Apache Kafka by two-phase commit.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://kafka.apache.org/documentation/#semantics",
                "tags": ["apache"],
            }
        ],
        "hooks": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_provider_kafka2pc.hooks.kafka2pc",
                    "airflow_provider_kafka2pc.hooks.ledger",
                    "airflow_provider_kafka2pc.hooks.export",
                ],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_provider_kafka2pc.operators.prepare",
                    "airflow_provider_kafka2pc.operators.decision",
                    "airflow_provider_kafka2pc.operators.finish",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_provider_kafka2pc.sensors.dangling"],
            }
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_provider_kafka2pc.triggers.dangling"],
            }
        ],
    }
