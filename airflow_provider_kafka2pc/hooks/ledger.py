"""The coordinator ledger behind an Airflow connection (PostgreSQL or SQLite).

No connection id means the embedded default: SQLite under ``AIRFLOW_HOME``
(:meth:`Ledger.default_url`). The URL carries a password for PostgreSQL; it is only
ever shown with the password hidden.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook
from sqlalchemy.engine import URL, make_url

from ..errors import ConfigurationError
from ..ledger import Ledger
from ..utils.connections import require_connection

_POSTGRES_TYPES = ("postgres", "postgresql")
#: libpq parameters a PostgreSQL connection's extra may carry into the URL.
_POSTGRES_QUERY = (
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "connect_timeout",
    "application_name",
    "options",
    "target_session_attrs",
)


class LedgerHook(BaseHook):
    """Opens the :class:`Ledger` a connection names.

    :param ledger_conn_id: a ``postgres`` or ``sqlite`` connection (for SQLite the host
        field is the database file's path); None for SQLite under ``AIRFLOW_HOME``.
    """

    conn_name_attr = "ledger_conn_id"
    hook_name = "Kafka two-phase commit ledger"

    def __init__(self, ledger_conn_id: str | None = None) -> None:
        super().__init__()
        self.ledger_conn_id = ledger_conn_id

    def url(self) -> URL:
        if self.ledger_conn_id is None:
            return make_url(Ledger.default_url())
        conn = require_connection("ledger", self.ledger_conn_id)
        kind = (conn.conn_type or "").lower()
        if kind in _POSTGRES_TYPES:
            extra: dict[str, Any] = conn.extra_dejson
            return URL.create(
                "postgresql+psycopg",
                username=conn.login or None,
                password=conn.password or None,
                host=conn.host or None,
                port=conn.port or None,
                database=conn.schema or None,
                query={k: str(extra[k]) for k in _POSTGRES_QUERY if k in extra},
            )
        if kind == "sqlite":
            if not conn.host:
                raise ConfigurationError(
                    f"ledger connection {self.ledger_conn_id!r} is sqlite without a database "
                    "path: put the file's path in the host field"
                )
            return URL.create("sqlite", database=conn.host)
        raise ConfigurationError(
            f"ledger connection {self.ledger_conn_id!r} has type {conn.conn_type!r}; "
            "the ledger runs on a 'postgres' or 'sqlite' connection"
        )

    def describe(self) -> str:
        """Where the ledger is, password hidden (for log lines)."""
        return self.url().render_as_string(hide_password=True)

    def get_conn(self) -> Ledger:
        """A ledger migrated to the package's schema; close it (or use ``with``) when done."""
        return Ledger(self.url().render_as_string(hide_password=False))
