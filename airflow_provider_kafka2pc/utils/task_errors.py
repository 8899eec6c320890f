"""How this package's errors become Airflow's, in one place for every task and trigger.

The errors carry their own kind (:mod:`airflow_provider_kafka2pc.errors`):

* :class:`~airflow_provider_kafka2pc.errors.PermanentError`: the task fails without
  retrying (``AirflowFailException``); its message says what a person must change.
* :class:`~airflow_provider_kafka2pc.errors.RetriableError`: the sensor pokes again and
  the trigger runs another round; an operator lets Airflow retry the task.
* anything else: the task's own ``retries`` decide, as for any Airflow task.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import PermanentError, RetriableError
from ..version_compat import AirflowFailException


class Handling(enum.Enum):
    """What a task does with an error."""

    RETRY = "retry"
    FAIL = "fail"
    UNKNOWN = "unknown"


def handling(exc: BaseException) -> Handling:
    if isinstance(exc, PermanentError):
        return Handling.FAIL
    if isinstance(exc, RetriableError):
        return Handling.RETRY
    return Handling.UNKNOWN


@contextmanager
def failing_permanent_errors() -> Iterator[None]:
    """Wrap an operator's work: a permanent error fails the task without retries."""
    try:
        yield
    except PermanentError as exc:
        raise AirflowFailException(str(exc)) from exc
