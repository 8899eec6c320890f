"""Why a prepare job failed, carried across the process boundary with its class and words.

spark-submit reports only an exit code: the Spark provider's hook raises
``AirflowException("Cannot execute: spark-submit ...")`` for any of them, and Airflow would
retry a refusal no retry can mend. So the application writes a :class:`JobFailure` beside its
manifest (:func:`failure_uri`) before it exits non-zero, and the task that ran it raises the
same kafka2pc error again (:meth:`JobFailure.error`): its class, its message first, and
whether a retry can help (:class:`~..errors.PermanentError`) survive the boundary.
"""

from __future__ import annotations

import json
from contextlib import suppress
from dataclasses import dataclass

from .. import errors
from ..errors import Kafka2pcError, PermanentError, PrepareError

#: Version of the failure document; a reader ignores another one.
FAILURE_VERSION = 1


def job_message(exc: BaseException) -> str:
    """What a failed Spark call says, in one line: for an error from the JVM (py4j), its
    class and message and its root cause's message, without the Java stack; else the
    first line of its text (Spark Connect's errors carry the server's message there)."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        from py4j.protocol import Py4JError  # present wherever a py4j error is

        try:
            cause = java
            while cause.getCause() is not None:
                cause = cause.getCause()
            return f"{java.getClass().getSimpleName()}: {java.getMessage()}" + (
                f" ({cause.getClass().getSimpleName()}: {cause.getMessage()})"
                if cause is not java
                else ""
            )
        except Py4JError:  # the JVM cannot be asked any more: Python's text
            pass
    details = getattr(exc, "details", None)
    if callable(details) and _is_rpc_error(exc):  # gRPC's own error: the server's words
        with suppress(Exception):  # a call that ended without details: its text below
            said = str(details() or "").strip()
            if said:
                return said.splitlines()[0][:500]
    text = str(exc).strip()
    return text.splitlines()[0][:500] if text else type(exc).__name__


def _is_rpc_error(exc: BaseException) -> bool:
    """A gRPC error a Spark Connect call raised as itself (not as PySpark's exception),
    whose text starts ``<_MultiThreadedRendezvous of RPC that terminated with:``."""
    try:
        import grpc
    except ImportError:  # no Spark Connect client here
        return False
    return isinstance(exc, grpc.RpcError)


def failure_uri(manifest: str) -> str:
    """Where a job whose manifest goes to ``manifest`` writes its failure."""
    return f"{manifest}.failure.json"


@dataclass(frozen=True)
class JobFailure:
    """A kafka2pc error as the job raised it: its class name, message and kind."""

    error: str
    message: str
    permanent: bool

    @classmethod
    def of(cls, exc: BaseException) -> JobFailure:
        return cls(type(exc).__name__, str(exc), isinstance(exc, PermanentError))

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": FAILURE_VERSION,
                "error": self.error,
                "message": self.message,
                "permanent": self.permanent,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> JobFailure | None:
        """The failure a job wrote; None for a document this release cannot read."""
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict) or data.get("version") != FAILURE_VERSION:
            return None
        return cls(str(data.get("error")), str(data.get("message")), bool(data.get("permanent")))

    def exception(self, detail: str = "") -> Kafka2pcError:
        """The error to raise in the task: the job's own class where this release has it
        (built from its message), else a :class:`PrepareError` (or a permanent
        :class:`~..errors.ConfigurationError`) that names it. ``detail`` follows the
        message (where the Spark log is)."""
        message = f"{self.message}{detail}"
        found = getattr(errors, self.error, None)
        if isinstance(found, type) and issubclass(found, Kafka2pcError):
            try:
                return found(message)
            except TypeError:  # a class with more required arguments: keep its kind
                pass
        kind: type[Kafka2pcError] = errors.ConfigurationError if self.permanent else PrepareError
        return kind(f"{self.error}: {message}")
