"""One exception hierarchy for the whole package, rooted in :class:`Kafka2pcError`."""

from __future__ import annotations


class Kafka2pcError(Exception):
    """Root of every error this package raises on purpose."""


class ConfigurationError(Kafka2pcError, ValueError):
    """A setting or argument is invalid; the message names it."""


class CommittableError(Kafka2pcError, ValueError):
    """A committable document is malformed; the message names the field."""


class BrokerUnreachableError(Kafka2pcError):
    """No broker answered within the timeout; the message names the addresses tried."""


class WriteError(Kafka2pcError):
    """Writing a transaction failed; it was aborted before the error was raised."""


class UnsupportedError(Kafka2pcError):
    """The broker does not offer the API this call needs."""


class ProtocolError(Kafka2pcError):
    """The broker answered with an error we do not retry; carries the Kafka error name."""

    def __init__(self, message: str, error_name: str | None = None) -> None:
        super().__init__(message)
        self.error_name = error_name


class TransactionInDoubtError(Kafka2pcError):
    """The outcome could not be established before the deadline; safe to retry later."""
