"""Where the ledger lives: URLs, engines (with SQLite's locking recipe) and migrations."""

from __future__ import annotations

import functools
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import URL, Connection, Engine, create_engine, event, func, select
from sqlalchemy.engine import make_url

from ..errors import LedgerSchemaError
from .schema import VERSION_TABLE

MIGRATIONS = Path(__file__).with_name("migrations")
SQLITE_BUSY_TIMEOUT_MS = 30_000
# PostgreSQL advisory locks ("k2pc" + purpose), held until the transaction ends.
LOCK_MIGRATE = 0x6B327063_00000001
LOCK_PREFIXES = 0x6B327063_00000002
_READ_ONLY = "kafka2pc_read_only"


def default_url() -> str:
    home = os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow")
    return f"sqlite:///{Path(home) / 'kafka2pc_ledger.db'}"


def normalise_url(url: str | URL) -> URL:
    parsed = make_url(url)
    if parsed.drivername in ("postgres", "postgresql"):
        # SQLAlchemy's default PostgreSQL driver is psycopg2; we ship psycopg 3.
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    return parsed


def open_engine(url: URL) -> Engine:
    if url.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    engine = create_engine(url)

    # SQLAlchemy's documented recipe: pysqlite must not emit BEGIN itself; we do, so that
    # writers take the database's write lock up front (BEGIN IMMEDIATE, waiting up to the
    # busy timeout) and every compare-and-set reads and writes under it, across processes.
    # Readers use a plain BEGIN: with WAL they run alongside the writer.
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        _use_wal(cursor)
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        read_only = conn.get_execution_options().get(_READ_ONLY)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


def _use_wal(cursor: Any) -> None:
    """Switch the file to WAL (persistent), retrying: two processes opening a new ledger
    at once can both try, and the loser gets "database is locked" without the busy timeout.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode = WAL").fetchone()[0] in ("wal", "memory"):
                return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise sqlite3.OperationalError("could not switch the ledger to WAL: database is locked")
        time.sleep(0.05)


@contextmanager
def writing(engine: Engine) -> Iterator[Connection]:
    """One write transaction (serialised against other writers on SQLite)."""
    with engine.begin() as conn:
        yield conn


@contextmanager
def reading(engine: Engine) -> Iterator[Connection]:
    with engine.connect() as conn:
        conn.execution_options(**{_READ_ONLY: True})
        with conn.begin():
            yield conn


def advisory_lock(conn: Connection, key: int) -> None:
    """On PostgreSQL, queue behind other holders of ``key`` until our transaction ends.

    SQLite needs none: a writer already holds the whole database.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_advisory_xact_lock(key)))


def _alembic() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    return config


@functools.cache
def _revisions() -> tuple[str, ...]:
    """Every schema revision this provider ships, newest first (read once per process:
    the ledger is opened by every task, the page on every request)."""
    scripts = ScriptDirectory.from_config(_alembic())
    return tuple(script.revision for script in scripts.walk_revisions())


def schema_revision(engine: Engine) -> str | None:
    """The database's ledger schema revision; None where no ledger was ever migrated."""
    with engine.connect() as conn:
        return _current(conn)


def _current(conn: Connection) -> str | None:
    context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def check_revision(current: str | None, at: str, *, upgrading: bool = False) -> None:
    """Refuse a ledger schema this provider does not read: an older one is upgraded by
    ``kafka2pc ledger upgrade`` (or any export task, which migrates on opening; so while
    ``upgrading`` it is fine), a newer one needs the newer provider on every worker,
    scheduler and API server alike."""
    revisions = _revisions()
    if current is None or current == revisions[0]:
        return
    if current in revisions:
        if upgrading:
            return
        raise LedgerSchemaError(
            f"the ledger at {at} has schema revision {current}, this provider reads "
            f"{revisions[0]}: upgrade it with `kafka2pc ledger upgrade` (or run any export, "
            "whose tasks migrate it); nothing was read"
        )
    raise LedgerSchemaError(
        f"the ledger at {at} has schema revision {current}, newer than this provider's "
        f"{revisions[0]}: a newer provider migrated it; install that version here too"
    )


def migrate(engine: Engine, revision: str = "head") -> None:
    """``alembic upgrade <revision>`` in one transaction; a no-op when already there.

    Concurrent callers queue (SQLite's write lock, a PostgreSQL advisory lock) and the
    later ones find the schema at head. A schema newer than this provider's is refused
    (:class:`~..errors.LedgerSchemaError`), not left to Alembic's "can't locate revision".
    """
    config = _alembic()
    with writing(engine) as conn:
        advisory_lock(conn, LOCK_MIGRATE)
        check_revision(_current(conn), engine.url.render_as_string(), upgrading=True)
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
