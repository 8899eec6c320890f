"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point.

No connection type of our own: Kafka settings come from the official Kafka provider's
``kafka`` connection, Spark's from the ``spark`` connection, the ledger's from a
``postgres`` or ``sqlite`` one. The ``kafka2pc`` config section holds the deployment
knobs (read by :mod:`.utils.config`; defaults from :mod:`.defaults`).
"""

from __future__ import annotations

from typing import Any

from . import __version__, defaults

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
                    "airflow_provider_kafka2pc.hooks.registry",
                    "airflow_provider_kafka2pc.hooks.spark_connect",
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
                    "airflow_provider_kafka2pc.operators.external",
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
        "config": {
            "kafka2pc": {
                "description": "Deployment defaults of exactly-once Kafka exports; an argument "
                "given to an export or operator wins.",
                "options": {
                    "grace_period_s": {
                        "description": "Seconds a batch may stay unchanged, or a transaction "
                        "without a ledger record stay open, before recovery treats it as "
                        "abandoned. Longer than the slowest prepare.",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "7200",
                        "default": str(defaults.GRACE_PERIOD.total_seconds()),
                    },
                    "commit_margin_s": {
                        "description": "Seconds the commit needs before the earliest "
                        "transaction timeout; less left at the decision means ABORT.",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "120",
                        "default": str(defaults.COMMIT_MARGIN_S),
                    },
                    "transaction_timeout_ms": {
                        "description": "How long a prepared transaction may stay open; at "
                        "most the brokers' transaction.max.timeout.ms.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "600000",
                        "default": str(defaults.TRANSACTION_TIMEOUT_MS),
                    },
                    "ui_kafka_conn_id": {
                        "description": "The kafka connection the Kafka exports page of the UI "
                        "looks for open transactions on, and recovers through. One per "
                        "deployment: exports to another cluster are not for this page.",
                        "version_added": "0.2.0",
                        "type": "string",
                        "example": "kafka_default",
                        "default": defaults.KAFKA_CONN_ID,
                    },
                    "ui_ledger_conn_id": {
                        "description": "The ledger connection (postgres or sqlite) the Kafka "
                        "exports page reads; empty for SQLite under AIRFLOW_HOME, as exports "
                        "without a ledger_conn_id use.",
                        "version_added": "0.2.0",
                        "type": "string",
                        "example": "kafka2pc_ledger",
                        "default": "",
                    },
                    "ui_recent_batches": {
                        "description": "Batches the Kafka exports page shows per export, newest "
                        "first; batches in doubt are shown whatever their age.",
                        "version_added": "0.2.0",
                        "type": "integer",
                        "example": "25",
                        "default": str(defaults.UI_RECENT_BATCHES),
                    },
                },
            }
        },
    }
