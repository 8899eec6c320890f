"""Airflow's environment for the tests: set before anything imports airflow.

Airflow reads its configuration once, at import; a test session (and each child process
that runs ``dag.test()``) therefore configures a private ``AIRFLOW_HOME`` first.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


#: Settings for a quiet, example-free Airflow with a SQLite metadata DB in its home.
def settings(home: Path) -> dict[str, str]:
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
        # Metrics go nowhere unless a test turns them on.
        "AIRFLOW__METRICS__STATSD_ON": "False",
    }


def configure(home: Path | None = None) -> Path:
    """Point Airflow at ``home`` (a new temporary directory by default) and return it."""
    if "airflow.configuration" in sys.modules:
        raise RuntimeError(
            "airflow was imported before tests/airflow could configure it; "
            "import tests.airflow.env first"
        )
    home = home or Path(tempfile.mkdtemp(prefix="kafka2pc-airflow-"))
    (home / "dags").mkdir(parents=True, exist_ok=True)
    os.environ.update(settings(home))
    return home


def without_airflow(**extra: str) -> dict[str, str]:
    """This process's environment without its Airflow settings, and ``extra``: for a child
    that configures an Airflow of its own (a deployment, a fault run, the fork server)."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}, **extra}


def reconfigure(home: Path) -> Path:
    """Point an Airflow imported for another home at ``home``: in a process forked from
    one that imported it (``tests/faults/forkserver.py``). Airflow reads its settings from
    the environment on each look-up; what it derived from them at import (the metadata DB's
    engine and sessions, the dags folder) is derived again."""
    from airflow import settings as airflow_settings

    (home / "dags").mkdir(parents=True, exist_ok=True)
    os.environ.update(settings(home))
    airflow_settings.configure_vars()
    airflow_settings.configure_orm()
    return home
