"""The seam: what the transaction pieces need from a broker, as typing protocols.

:class:`~.client.KafkaProtocol` is the real one; tests put a scripted stand-in here for
the answers a real broker cannot be made to give (Kafka's own tests script the client's
answers the same way). Only the calls the transaction pieces make are named.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from .described import DescribedTransaction
from .fetch import FetchAnswer
from .producer import InitProducerIdAnswer, ProduceAnswer
from .records import ControlType, Row
from .versions import ApiKey


class TransactionProtocol(Protocol):
    """What the controller and the audit need from a broker; scripted in tests.

    ``log_start_offset`` is asked only when a fetch answers OFFSET_OUT_OF_RANGE (the audit
    of a log that retention or DeleteRecords shortened)."""

    def api_version(self, api: ApiKey, cap: int | None = None) -> int | None: ...

    def find_transaction_coordinator(self, transactional_id: str) -> tuple[int, int]: ...

    def end_txn(
        self,
        node: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        result: ControlType,
        version: int,
    ) -> int: ...

    def init_producer_id(
        self, node: int, transactional_id: str, transaction_timeout_ms: int
    ) -> InitProducerIdAnswer: ...

    def partition_leaders(self, topic: str) -> dict[int, int]: ...

    def fetch(
        self,
        node: int,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_wait_ms: int,
        with_keys: bool = False,
        max_bytes: int = ...,
        with_records: bool = False,
    ) -> FetchAnswer: ...

    def log_start_offset(self, node: int, topic: str, partition: int) -> tuple[int, int]: ...

    def close(self) -> None: ...


class NativeTransactionProtocol(TransactionProtocol, Protocol):
    """What the KIP-939 native writer needs on top of the controller's calls."""

    def offers_kip939(self) -> bool: ...

    def init_producer_id(
        self,
        node: int,
        transactional_id: str,
        transaction_timeout_ms: int,
        *,
        enable_2pc: bool = False,
        keep_prepared_txn: bool = False,
        version: int | None = None,
    ) -> InitProducerIdAnswer: ...

    def add_partitions_to_txn(
        self,
        node: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        topic: str,
        partitions: Sequence[int],
    ) -> dict[int, int]: ...

    def produce_transactional(
        self,
        node: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        topic: str,
        records: Mapping[int, Sequence[Row]],
        *,
        kip890: bool,
        base_sequence: int | Mapping[int, int] = 0,
    ) -> dict[int, ProduceAnswer]: ...

    def describe_transaction(self, transactional_id: str) -> DescribedTransaction | None: ...
