"""Every exception this package raises on purpose, under one root: :class:`Kafka2pcError`.

Two marker bases say what a retry can do, as Kafka's ``RetriableException`` does:

* :class:`RetriableError`: transient (a broker moving, a lost connection, a lost
  compare-and-set); the same call later may succeed.
* :class:`PermanentError`: the input or the recorded state forbids it; no retry mends it,
  a person must act.

An error with neither marker (a broker refusal we do not classify, a Spark job that
failed) is left to the caller's retry policy. ``utils/task_errors.py`` maps the two
markers onto Airflow once, for every operator, the sensor and the trigger.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any


class Kafka2pcError(Exception):
    """Root of every error this package raises on purpose."""


class RetriableError(Kafka2pcError):
    """A transient failure: the same call may succeed later."""


class PermanentError(Kafka2pcError):
    """A failure no retry can mend: the message says what a person must change."""


# -- input and documents ---------------------------------------------------------------------


class ConfigurationError(PermanentError, ValueError):
    """A setting or argument is invalid; the message names it."""


class CommittableError(PermanentError, ValueError):
    """A committable document is malformed; the message names the field."""


class TimestampRefusedError(ConfigurationError):
    """The records' timestamps (``timestamp_column``) are ones a topic will not keep: its
    time retention would delete them at once, or the broker would reject the write
    (``message.timestamp.before/after.max.ms``). Raised before any transaction opens; the
    message names the column, the value, the topic, the setting and the fix. ``refusals``:
    each one (:class:`~airflow_provider_kafka2pc.transaction.retention.Refusal`)."""

    def __init__(self, message: str, refusals: Iterable[Any] = ()) -> None:
        super().__init__(message)
        self.refusals = tuple(refusals)


class TlsError(ConfigurationError):
    """A TLS handshake with the broker failed (its certificate is not trusted or does not
    name the host, the client certificate is refused, the key does not decrypt); the
    message names the TLS problem and the ``ssl.*`` setting to change."""


class AuthorizationError(PermanentError):
    """The broker refused an operation for lack of an ACL
    (``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``, ``TOPIC_AUTHORIZATION_FAILED``, ...); the
    message names the principal, the resource and the operations it needs. Carries the Kafka
    error name."""

    def __init__(self, message: str, error_name: str | None = None) -> None:
        super().__init__(message)
        self.error_name = error_name


# -- the broker ------------------------------------------------------------------------------


class BrokerUnreachableError(RetriableError):
    """No broker answered within the timeout; the message names the addresses tried."""


class SchemaRegistryUnreachableError(RetriableError):
    """The schema registry did not answer; the message names its address (never its
    credentials). Raised before any transaction opens."""


class SchemaRefusedError(ConfigurationError):
    """The schema registry refused the schema (incompatible with the subject's versions,
    invalid) or does not hold it under the subject; the message names the subject."""


class ConnectionLostError(RetriableError):
    """The broker dropped the connection or did not answer in time."""


class BrokerMovedError(RetriableError):
    """The broker answered "not here" or "not yet": the partition's leader or the
    transaction coordinator moved or is still loading (NOT_LEADER_OR_FOLLOWER,
    NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...). Re-resolve it and ask again;
    carries the Kafka error name."""

    def __init__(self, message: str, error_name: str | None = None) -> None:
        super().__init__(message)
        self.error_name = error_name


class FailoverTimeoutError(ConnectionLostError, BrokerUnreachableError):
    """A broker call found no usable answer through a failover before its deadline; the
    message names the call, how long it was tried and the last error (which node or
    address did not answer, or what it said). Retriable: the cluster may recover."""


class UnsupportedError(PermanentError):
    """The broker does not offer the API this call needs."""


class ProtocolError(Kafka2pcError):
    """The broker answered with an error we do not retry; carries the Kafka error name."""

    def __init__(self, message: str, error_name: str | None = None) -> None:
        super().__init__(message)
        self.error_name = error_name


class WriteError(RetriableError):
    """Writing a transaction failed; it was aborted before the error was raised."""


class TransactionInDoubtError(RetriableError):
    """The outcome could not be established before the deadline; safe to retry later."""


class BrokerFetchError(Kafka2pcError):
    """Apache Kafka could not be fetched; the message names the version and cache path."""


# -- the ledger ------------------------------------------------------------------------------


class LedgerError(Kafka2pcError):
    """Root of the ledger's errors."""


class NotFoundError(LedgerError, LookupError):
    """No such batch (begin() it first) or no such participant in its current attempt."""


class IllegalTransitionError(LedgerError):
    """The move is not in the transition table; the message names batch, from and to."""

    def __init__(self, batch: str, current: enum.Enum, target: enum.Enum, why: str = "") -> None:
        detail = f": {why}" if why else ""
        super().__init__(
            f"batch {batch}: illegal transition {current.value} -> {target.value}{detail}"
        )
        self.batch, self.current, self.target = batch, current, target


class ConflictError(LedgerError, RetriableError):
    """A compare-and-set lost: another process moved the row first. Re-read and retry."""


class PrefixOwnedError(LedgerError, ConfigurationError):
    """The transactional-id prefix belongs to another export (or overlaps one of its prefixes)."""


class LedgerSchemaError(LedgerError, ConfigurationError):
    """The ledger's schema is not the one this provider reads: older (upgrade the ledger:
    ``kafka2pc ledger upgrade``, or any export task) or newer (upgrade the provider)."""


# -- the coordinator's second phase ------------------------------------------------------------


class NothingPreparedError(PermanentError):
    """No batch for this run key: the prepare failed before the ledger was touched."""


class VerdictMismatchError(PermanentError):
    """The recorded verdict is not the one this step finishes (commit vs abort)."""


class ParticipantLostError(PermanentError):
    """A participant of a COMMIT verdict was aborted on the broker: its records are missing.

    Retrying the commit cannot bring them back; the participant must be re-prepared
    (loss repair). ``lost`` names each lost partition and its rows
    (:class:`~airflow_provider_kafka2pc.coordination.finish.LostPartition`).
    """

    def __init__(self, message: str, lost: Iterable[Any] = ()) -> None:
        super().__init__(message)
        self.lost = tuple(lost)


class RepairImpossibleError(ParticipantLostError):
    """The lost partitions cannot be recomputed as they were (the source changed or is
    gone): nothing was written again, the batch stays COMMIT_DECIDED with its LOST
    participants, and a person must act."""


class RepairFailedError(RetriableError):
    """Re-preparing the lost partitions failed for a reason a retry may mend (the Spark job
    failed); they stay LOST and the batch COMMIT_DECIDED."""


# -- the Spark prepare -------------------------------------------------------------------------


class PrepareError(Kafka2pcError):
    """The Spark job did not prepare every partition; abort the run's transactional ids."""


class SourceChangedError(PermanentError):
    """A re-prepare found other partition counts than the recorded ones; nothing was written.

    The input is no longer the one the batch was prepared from, so a lost partition cannot
    be recomputed: re-writing it would commit records the rest of the batch never had.
    """

    def __init__(self, message: str, partition_rows: Sequence[int]) -> None:
        super().__init__(message)
        self.partition_rows = tuple(partition_rows)


__all__ = [
    "AuthorizationError",
    "BrokerFetchError",
    "BrokerMovedError",
    "BrokerUnreachableError",
    "CommittableError",
    "ConfigurationError",
    "ConflictError",
    "ConnectionLostError",
    "FailoverTimeoutError",
    "IllegalTransitionError",
    "Kafka2pcError",
    "LedgerError",
    "LedgerSchemaError",
    "NotFoundError",
    "NothingPreparedError",
    "ParticipantLostError",
    "PermanentError",
    "PrefixOwnedError",
    "PrepareError",
    "ProtocolError",
    "RepairFailedError",
    "RepairImpossibleError",
    "RetriableError",
    "SourceChangedError",
    "TimestampRefusedError",
    "TlsError",
    "TransactionInDoubtError",
    "UnsupportedError",
    "VerdictMismatchError",
    "WriteError",
]
