"""How this package's errors become Airflow's, in one place for every task and trigger.

The errors carry their own kind (:mod:`airflow_provider_kafka2pc.errors`):

* :class:`~airflow_provider_kafka2pc.errors.PermanentError`: the task fails without
  retrying: the error is raised again as itself *and* an ``AirflowFailException``
  (:func:`failing`), so the task log shows the kafka2pc class and its words, and a caller
  can still catch it as the kafka2pc error it is.
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


_FAILING: dict[type[BaseException], type[BaseException]] = {}


def failing(exc: PermanentError) -> BaseException:
    """``exc`` as an error of its own class that is also an ``AirflowFailException``:
    Airflow fails the task without a retry (it checks for that class), and the log names
    the kafka2pc error, e.g. ``ConfigurationError: topic column 'dest' names topic ...``.

    The class is made once per error class (``ConfigurationError`` and
    ``AirflowFailException`` as bases, same name and module); the instance carries the
    original's arguments and attributes without calling its ``__init__``, whose signature
    varies (``AuthorizationError(message, error_name)``)."""
    kind = type(exc)
    made = _FAILING.get(kind)
    if made is None:
        made = type(kind.__name__, (kind, AirflowFailException), {"__module__": kind.__module__})
        made.__qualname__ = kind.__qualname__
        _FAILING[kind] = made
    failed = made.__new__(made, *exc.args)
    failed.__dict__.update(exc.__dict__)
    return failed


@contextmanager
def failing_permanent_errors() -> Iterator[None]:
    """Wrap an operator's work: a permanent error fails the task without retries."""
    try:
        yield
    except PermanentError as exc:
        if isinstance(exc, AirflowFailException):
            raise
        raise failing(exc) from exc
