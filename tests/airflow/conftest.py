"""Fixtures for tests that run Airflow: a private home and metadata DB, connections, a ledger.

Airflow is configured here at import time, before anything imports it: a temporary
``AIRFLOW_HOME`` (removed at the end), no examples, a SQLite metadata DB migrated once
per session (``airflow_db``). Connections come from ``AIRFLOW_CONN_*`` variables:
``kafka_connection`` (the session broker), ``spark_connection`` (``local[2]``),
``ledger`` (a fresh SQLite ledger per test). ``export_dag``/``run_export`` build a DAG
around the export TaskGroup and run it with ``dag.test()``.
"""

from __future__ import annotations

import atexit
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.airflow import env

AIRFLOW_HOME = env.configure()
atexit.register(shutil.rmtree, AIRFLOW_HOME, True)

import pytest  # noqa: E402

from tests.airflow import dagtest  # noqa: E402


@pytest.fixture(scope="session")
def airflow_db() -> Iterator[Path]:
    """The session's Airflow home, its metadata DB created once and bundles synced
    (the home is removed when the session's process exits)."""
    dagtest.migrate()
    yield AIRFLOW_HOME


@pytest.fixture
def kafka_connection(monkeypatch: pytest.MonkeyPatch, settings: dict[str, Any]) -> str:
    """``kafka_default``: the official provider's connection to the session broker."""
    for key, value in dagtest.kafka_connection_env(settings).items():
        monkeypatch.setenv(key, value)
    return dagtest.KAFKA_CONN_ID


@pytest.fixture
def spark_connection(monkeypatch: pytest.MonkeyPatch) -> str:
    """``spark_default``: Spark ``local[2]``."""
    for key, value in dagtest.spark_connection_env().items():
        monkeypatch.setenv(key, value)
    return dagtest.SPARK_CONN_ID


@dataclass(frozen=True)
class LedgerHandle:
    conn_id: str
    path: Path

    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"

    def open(self) -> Any:
        """A :class:`Ledger` on this database (close it, or use ``with``)."""
        from airflow_provider_kafka2pc.ledger import Ledger

        return Ledger(self.url)


@pytest.fixture
def ledger(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> LedgerHandle:
    """A fresh SQLite ledger and its connection ``kafka2pc_ledger``."""
    path = tmp_path / "ledger.db"
    for key, value in dagtest.ledger_connection_env(path).items():
        monkeypatch.setenv(key, value)
    return LedgerHandle(dagtest.LEDGER_CONN_ID, path)


@pytest.fixture
def export_env(
    airflow_db: Path, kafka_connection: str, spark_connection: str, ledger: LedgerHandle
) -> LedgerHandle:
    """Everything an export run needs: Airflow DB, the three connections; returns the ledger."""
    return ledger


@pytest.fixture
def export_dag(export_env: LedgerHandle, request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``export_dag(topic=..., **options)``: a DAG with the export group, named after the test."""
    counter = iter(range(1000))

    def build(dag_id: str | None = None, **kwargs: Any) -> Any:
        name = dag_id or f"{request.node.name}_{next(counter)}"
        return dagtest.export_dag(_dag_id(name), **kwargs)

    return build


@pytest.fixture
def run_export() -> Callable[..., dagtest.DagTestResult]:
    """``run_export(dag, day=1)``: register the DAG, ``dag.test()`` the interval, states back."""
    return dagtest.run


def _dag_id(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:200]
