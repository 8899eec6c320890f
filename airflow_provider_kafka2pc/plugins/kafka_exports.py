"""The Airflow plugin behind the "Kafka exports" page, registered by the package's
``airflow.plugins`` entry point (installed with the provider, no plugins folder needed).

Airflow loads every plugin in every component, workers included; only the API server
mounts ``fastapi_apps``. The page's FastAPI app is therefore built on first access of that
attribute, so a worker loading the plugin imports neither FastAPI nor the API server.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from ..version_compat import AirflowPlugin

#: The page's path on the API server, and its route in the UI (``/plugin/kafka-exports``).
URL_PREFIX = "/kafka2pc"
URL_ROUTE = "kafka-exports"


@cache
def _apps() -> list[dict[str, Any]]:
    """One app per process, however often Airflow asks."""
    from .page import create_app

    return [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Kafka exports"}]


class KafkaExportsPlugin(AirflowPlugin):
    """Adds "Kafka exports" to the UI's navigation: every export's batches, what is open
    on the broker under its prefix, leased ids, and a "recover now" for DAG editors."""

    name = "kafka2pc"
    external_views = [  # noqa: RUF012 (AirflowPlugin's own attribute, read per instance)
        {
            "name": "Kafka exports",
            "href": f"{URL_PREFIX}/",
            "destination": "nav",
            "url_route": URL_ROUTE,
        }
    ]

    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return _apps()
