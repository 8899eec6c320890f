"""What is open on the broker under an export's transactional-id prefix.

ListTransactions finds the ids (an id pattern on the broker from Kafka 4.1, our prefix
filter before that; the ledger's leases where the broker cannot list), DescribeTransactions
says each one's producer id, epoch, start and timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ... import defaults, naming
from ...errors import ProtocolError, UnsupportedError
from ...ledger import Ledger
from ...protocol.client import KafkaProtocol
from ...protocol.described import OPEN_STATES, CoordinatorTxnState, DescribedTransaction
from ...protocol.versions import ApiKey

log = logging.getLogger(__name__)

ONGOING = CoordinatorTxnState.ONGOING


@dataclass(frozen=True)
class OpenTransaction:
    """One transaction the coordinator reports open under the export's prefix."""

    transactional_id: str
    state: CoordinatorTxnState
    producer_id: int
    producer_epoch: int
    #: When the coordinator saw it begin (epoch ms); -1 when unknown.
    start_time_ms: int
    timeout_ms: int
    partitions: tuple[str, ...] = ()

    @classmethod
    def described(cls, d: DescribedTransaction) -> OpenTransaction:
        return cls(
            transactional_id=d.transactional_id,
            state=d.state,
            producer_id=d.producer_id,
            producer_epoch=d.producer_epoch,
            start_time_ms=d.transaction_start_time_ms,
            timeout_ms=d.transaction_timeout_ms,
            partitions=d.partitions,
        )

    @classmethod
    def unknown(cls, transactional_id: str) -> OpenTransaction:
        """An id whose state the broker cannot tell (no DescribeTransactions)."""
        return cls(transactional_id, CoordinatorTxnState.UNKNOWN, -1, -1, -1, -1)

    @property
    def known(self) -> bool:
        return self.state is not CoordinatorTxnState.UNKNOWN

    @property
    def identity(self) -> tuple[int, int]:
        return self.producer_id, self.producer_epoch

    def age(self, now: datetime) -> timedelta | None:
        if self.start_time_ms < 0:
            return None
        return now - datetime.fromtimestamp(self.start_time_ms / 1000, UTC)

    def to_dict(self, now: datetime) -> dict[str, Any]:
        age = self.age(now)
        return {
            **asdict(self),
            "partitions": list(self.partitions),
            "age_s": None if age is None else round(age.total_seconds(), 1),
        }


@dataclass(frozen=True)
class Discovery:
    """The open transactions under one prefix, and how they were found."""

    id_prefix: str
    method: str
    transactions: tuple[OpenTransaction, ...]


def discover(
    protocol: KafkaProtocol,
    ledger: Ledger,
    id_prefix: str,
    *,
    settle_s: float = defaults.SETTLE_S,
    sleep: Callable[[float], None] = time.sleep,
) -> Discovery:
    """Open transactions whose id is ``<id_prefix>-<slot>``.

    ListTransactions (an id pattern on the broker from Kafka 4.1, our prefix filter before
    that), then DescribeTransactions for producer id, epoch, start and timeout. A broker
    without ListTransactions: the ledger's leases of the prefix are the candidates (every
    id the pool ever handed out has one). A transaction the coordinator is already ending
    (Prepare*) is waited for up to ``settle_s``.
    """
    pattern = naming.pattern(id_prefix)
    try:
        listed = protocol.list_transactions(naming.starts(id_prefix), OPEN_STATES)
    except UnsupportedError:
        ids = [lease.transactional_id for lease in ledger.leases(id_prefix)]
        method = "ledger leases (the broker offers no ListTransactions)"
    else:
        ids = [r.transactional_id for r in listed if pattern.fullmatch(r.transactional_id)]
        on_broker = (protocol.api_version(ApiKey.LIST_TRANSACTIONS) or 0) >= 2
        method = "ListTransactions, " + (
            "id pattern on the broker" if on_broker else "prefix filtered here (broker < 4.1)"
        )
    try:
        described = _describe(protocol, ids)
    except UnsupportedError:
        method += "; no DescribeTransactions: states unknown"
        found = tuple(OpenTransaction.unknown(tid) for tid in sorted(ids))
        return Discovery(id_prefix, method, found)
    found = tuple(
        _settle(protocol, t, settle_s, sleep)
        for t in sorted(described.values(), key=lambda t: t.transactional_id)
        if t.state.open
    )
    return Discovery(id_prefix, method, tuple(t for t in found if t.state.open))


def _describe(protocol: KafkaProtocol, ids: Sequence[str]) -> dict[str, OpenTransaction]:
    if not ids:
        return {}
    try:
        rows = protocol.describe_transactions(list(ids))
    except ProtocolError as exc:
        # One id's error answer fails the whole request (one ended and forgotten since it was
        # listed: TRANSACTIONAL_ID_NOT_FOUND): ask one by one, each unknown id left out and
        # any other error raised for its own id.
        log.info("DescribeTransactions of %d ids failed (%s); asking per id", len(ids), exc)
        rows = [row for tid in ids if (row := protocol.describe_transaction(tid)) is not None]
    return {d.transactional_id: OpenTransaction.described(d) for d in rows}


def _settle(
    protocol: KafkaProtocol, txn: OpenTransaction, settle_s: float, sleep: Callable[[float], None]
) -> OpenTransaction:
    deadline = time.monotonic() + settle_s
    while txn.state.open and txn.state is not ONGOING and time.monotonic() < deadline:
        sleep(0.2)
        row = protocol.describe_transaction(txn.transactional_id)
        if row is None:
            return OpenTransaction(
                txn.transactional_id, CoordinatorTxnState.DEAD, *txn.identity, -1, -1
            )
        txn = OpenTransaction.described(row)
    return txn
