"""The Airflow releases this provider serves (3.1 to the newest 3.x), from one code base.

Airflow 3.2 moved the names below into the task SDK (``airflow.sdk``); 3.1 has them only
in Airflow core, under the names they had since 2.x. Each is taken from the SDK when it is
there, else from core, so the rest of the provider imports one name from here and the
newest release never sees a deprecated import. Features an older release lacks are
flagged here (``HAS_*``) and degrade where they are used, logged once per process (see
:func:`log_degraded_once`); the ledger stays the source of truth on every release.

Airflow 3.0 is not served: it requires SQLAlchemy < 2, and the ledger's compare-and-set
updates and migrations are written for SQLAlchemy 2.
"""

from __future__ import annotations

from typing import Any

from airflow import __version__ as _airflow_version
from packaging.version import Version

#: The installed Airflow release, without pre-release or local parts.
AIRFLOW_VERSION = Version(Version(_airflow_version).base_version)
AIRFLOW_V_3_2_PLUS = Version("3.2.0") <= AIRFLOW_VERSION
AIRFLOW_V_3_3_PLUS = Version("3.3.0") <= AIRFLOW_VERSION

#: The task state store (``context["task_state_store"]``) is new in Airflow 3.3.
HAS_TASK_STATE_STORE = AIRFLOW_V_3_3_PLUS

try:  # Airflow 3.2+
    from airflow.sdk import BaseBranchOperator, conf
    from airflow.sdk.exceptions import (
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSkipException,
    )
    from airflow.sdk.observability.stats import Stats
    from airflow.sdk.plugins_manager import AirflowPlugin
except ImportError:  # Airflow 3.1
    from airflow.configuration import conf  # type: ignore[no-redef]
    from airflow.exceptions import (  # type: ignore[no-redef]
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSkipException,
    )
    from airflow.plugins_manager import AirflowPlugin  # type: ignore[no-redef]
    from airflow.providers.standard.operators.branch import (  # type: ignore[no-redef]
        BaseBranchOperator,
    )
    from airflow.stats import Stats  # type: ignore[no-redef]

__all__ = [
    "AIRFLOW_VERSION",
    "AIRFLOW_V_3_2_PLUS",
    "AIRFLOW_V_3_3_PLUS",
    "HAS_TASK_STATE_STORE",
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowPlugin",
    "AirflowSkipException",
    "BaseBranchOperator",
    "Stats",
    "conf",
    "log_degraded_once",
]

_logged: set[str] = set()


def log_degraded_once(log: Any, feature: str, consequence: str) -> None:
    """Say once per process that ``feature`` is missing from this Airflow release and what
    the provider does instead (a worker runs one task per process: once per task log)."""
    if feature in _logged:
        return
    _logged.add(feature)
    log.warning(
        "Airflow %s has no %s: %s (the ledger remains the source of truth)",
        _airflow_version,
        feature,
        consequence,
    )
