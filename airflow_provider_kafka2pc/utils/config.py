"""The deployment knobs of the provider's ``[kafka2pc]`` configuration section.

Declared in :func:`~airflow_provider_kafka2pc.get_provider_info.get_provider_info`; each
falls back to :mod:`airflow_provider_kafka2pc.defaults`. Set them in ``airflow.cfg`` or
as ``AIRFLOW__KAFKA2PC__GRACE_PERIOD_S`` and so on; an argument given to an operator or
to the export wins over both.
"""

from __future__ import annotations

from datetime import timedelta

from .. import defaults
from ..version_compat import conf

SECTION = "kafka2pc"


def grace_period() -> timedelta:
    seconds = conf.getfloat(
        SECTION, "grace_period_s", fallback=defaults.GRACE_PERIOD.total_seconds()
    )
    return timedelta(seconds=seconds)


def commit_margin_s() -> float:
    return conf.getfloat(SECTION, "commit_margin_s", fallback=defaults.COMMIT_MARGIN_S)


def transaction_timeout_ms() -> int:
    return conf.getint(SECTION, "transaction_timeout_ms", fallback=defaults.TRANSACTION_TIMEOUT_MS)


def ui_kafka_conn_id() -> str:
    """The ``kafka`` connection the Kafka exports page discovers and recovers through."""
    return conf.get(SECTION, "ui_kafka_conn_id", fallback=defaults.KAFKA_CONN_ID) or (
        defaults.KAFKA_CONN_ID
    )


def ui_ledger_conn_id() -> str | None:
    """The ledger connection the Kafka exports page reads; None: SQLite under AIRFLOW_HOME."""
    return conf.get(SECTION, "ui_ledger_conn_id", fallback="") or None


def ui_recent_batches() -> int:
    return conf.getint(SECTION, "ui_recent_batches", fallback=defaults.UI_RECENT_BATCHES)
