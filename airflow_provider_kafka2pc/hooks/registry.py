"""The schema registry's address and credentials, from an Airflow ``http`` connection.

Why ``http``: a Confluent-compatible registry (Confluent's, Apicurio's ``/apis/ccompat/v7``,
Karapace) is an HTTP service with basic authentication, and Airflow's generic HTTP
connection form has exactly those fields (host with scheme and path, port, login,
password, extra); neither the official Kafka provider nor Airflow defines a registry
connection type, and a type of our own would be one more form to learn for the same
fields. Its extra holds further ``SchemaRegistryClient`` settings (``ssl.ca.location``,
``ssl.certificate.location``, ``ssl.key.location``, ``timeout``, ...).

The settings reach the Spark job in a private file (never its command line), and only
:func:`~..connection.registry.redacted` forms are logged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from airflow.sdk import BaseHook

from ..connection.registry import client_settings, redacted
from ..errors import ConfigurationError
from ..spark.job import private_config_file
from ..version_compat import AirflowNotFoundException


class SchemaRegistryHook(BaseHook):
    """A Confluent-compatible schema registry's ``SchemaRegistryClient`` settings.

    :param registry_conn_id: an ``http`` connection: host = the registry's URL (e.g.
        ``https://registry:8081`` or ``http://apicurio:8080/apis/ccompat/v7``), login and
        password for basic authentication, extra = more client settings.
    """

    conn_name_attr = "registry_conn_id"
    default_conn_name = "schema_registry_default"
    conn_type = "http"
    hook_name = "Schema Registry (Confluent-compatible API)"

    def __init__(self, registry_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.registry_conn_id = registry_conn_id

    def settings(self) -> dict[str, Any]:
        """``SchemaRegistryClient`` settings: url, basic.auth.user.info, the extra's."""
        try:
            conn = self.get_connection(self.registry_conn_id)
        except AirflowNotFoundException:
            raise ConfigurationError(
                f"schema registry connection {self.registry_conn_id!r} is not defined: create "
                'it (type http, host = the registry URL, e.g. {"conn_type": "http", "host": '
                '"http://registry:8081", "login": ..., "password": ...}) or set '
                f"AIRFLOW_CONN_{self.registry_conn_id.upper()}"
            ) from None
        settings: dict[str, Any] = dict(conn.extra_dejson or {})
        settings["url"] = _url(conn.host or "", conn.schema, conn.port)
        if conn.login:
            settings["basic.auth.user.info"] = f"{conn.login}:{conn.password or ''}"
        try:
            client_settings(settings)
        except ConfigurationError as exc:
            raise ConfigurationError(
                f"schema registry connection {self.registry_conn_id!r}: {exc}"
            ) from None
        return settings

    def describe(self) -> dict[str, Any]:
        """The settings fit for a log line (credentials as ``***``)."""
        return redacted(self.settings())

    @contextmanager
    def config_file(self) -> Iterator[Path]:
        """The settings in a file only this user can read, removed afterwards."""
        with private_config_file(self.settings()) as path:
            yield path


def _url(host: str, scheme: str | None, port: int | None) -> str:
    """The registry URL from the connection's host (with or without scheme), port."""
    text = host.strip()
    if "://" not in text:
        text = f"{scheme or 'http'}://{text}"
    parts = urlsplit(text)
    netloc = parts.netloc
    if port and parts.port is None:
        netloc = f"{netloc}:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
