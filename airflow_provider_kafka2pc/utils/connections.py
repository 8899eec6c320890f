"""Looking a connection up with an error that says how to create it."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from ..errors import ConfigurationError
from ..version_compat import AirflowNotFoundException

#: What each connection of an export looks like, for the error message.
HINTS = {
    "Kafka": 'type kafka, extra {"bootstrap.servers": "host:9092", ...} (librdkafka settings)',
    "Spark": 'type spark, host = the master URL, e.g. {"conn_type": "spark", "host": "local[2]"}',
    "ledger": "type postgres, or sqlite with the database file's path as host",
}


def require_connection(role: str, conn_id: str) -> Any:
    """The connection ``conn_id``; :class:`ConfigurationError` naming how to define it."""
    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise ConfigurationError(
            f"{role} connection {conn_id!r} is not defined: create it ({HINTS[role]}) or set "
            f"AIRFLOW_CONN_{conn_id.upper()}"
        ) from None
