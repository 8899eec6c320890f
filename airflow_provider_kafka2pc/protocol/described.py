"""What the transaction coordinator says of a transactional id, typed.

:class:`CoordinatorTxnState` is Kafka's own ``admin.TransactionState``: the coordinator's
states with Kafka's spelling as values, and :meth:`~CoordinatorTxnState.parse` mapping a
name it does not know to ``UNKNOWN`` (a newer broker may add states). Not to be confused
with :class:`~.log.MarkerView`, what the log's markers say of one committable.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any


class CoordinatorTxnState(enum.StrEnum):
    """A transaction's state at its coordinator (DescribeTransactions, ListTransactions)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"
    DEAD = "Dead"
    #: A name this version does not know, or a broker that cannot say.
    UNKNOWN = "Unknown"

    @classmethod
    def parse(cls, name: object) -> CoordinatorTxnState:
        try:
            return cls(str(getattr(name, "value", name)))
        except ValueError:
            return cls.UNKNOWN

    @property
    def open(self) -> bool:
        """Still holds back the last stable offset (Prepare*: the markers are being written)."""
        return self in _OPEN


_OPEN = frozenset(
    {
        CoordinatorTxnState.ONGOING,
        CoordinatorTxnState.PREPARE_COMMIT,
        CoordinatorTxnState.PREPARE_ABORT,
        CoordinatorTxnState.PREPARE_EPOCH_FENCE,
    }
)
#: The states in which a transaction holds back read_committed consumers, for filters.
OPEN_STATES: tuple[CoordinatorTxnState, ...] = tuple(s for s in CoordinatorTxnState if s.open)


@dataclass(frozen=True)
class DescribedTransaction:
    """One DescribeTransactions answer."""

    transactional_id: str
    state: CoordinatorTxnState
    producer_id: int
    producer_epoch: int
    coordinator: int
    transaction_timeout_ms: int
    #: When the coordinator saw the transaction begin (epoch ms); -1 when none is open.
    transaction_start_time_ms: int
    #: ``topic-partition`` names, sorted.
    partitions: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "state": self.state.value, "partitions": list(self.partitions)}


@dataclass(frozen=True)
class ListedTransaction:
    """One ListTransactions row."""

    broker: int
    transactional_id: str
    producer_id: int
    state: CoordinatorTxnState
    #: Who applied the prefix filter: "broker" (Kafka 4.1+), "client", or None (no filter).
    filtered_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "state": self.state.value}
