"""The producer's transaction calls: InitProducerId, AddPartitionsToTxn, Produce, EndTxn.

One pure builder and one pure parser per call, like kafka-python's own
``kafka/protocol/producer/``; choosing the version and sending is :mod:`.client`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)

from ..errors import UnsupportedError
from .fetch import FETCH_MAX_BYTES
from .records import ControlType, Row, transactional_batch
from .versions import INIT_PRODUCER_ID_2PC_VERSION


@dataclass(frozen=True)
class InitProducerIdAnswer:
    error: int
    producer_id: int
    producer_epoch: int
    #: v6 (KIP-939) with keepPreparedTxn: the transaction left open under the id, or -1.
    ongoing_producer_id: int = -1
    ongoing_producer_epoch: int = -1


@dataclass(frozen=True)
class ProduceAnswer:
    """One partition's answer to a Produce request."""

    error: int
    base_offset: int


def init_producer_id_request(
    transactional_id: str,
    transaction_timeout_ms: int,
    version: int,
    *,
    enable_2pc: bool = False,
    keep_prepared_txn: bool = False,
) -> InitProducerIdRequest:
    """A fresh init (-1/-1), which every broker treats as "abort what is open" unless
    KIP-939's ``keep_prepared_txn`` says otherwise; KIP-939's fields need v6."""
    kip939: dict[str, bool] = {}
    if version >= INIT_PRODUCER_ID_2PC_VERSION:
        kip939 = {"enable2_pc": enable_2pc, "keep_prepared_txn": keep_prepared_txn}
    elif enable_2pc or keep_prepared_txn:
        raise UnsupportedError(f"InitProducerId v{version} has no KIP-939 fields (v6+)")
    return InitProducerIdRequest(
        transactional_id=transactional_id,
        transaction_timeout_ms=transaction_timeout_ms,
        producer_id=-1,
        producer_epoch=-1,
        version=version,
        **kip939,
    )


def parse_init_producer_id(answer: Any) -> InitProducerIdAnswer:
    return InitProducerIdAnswer(
        answer.error_code,
        answer.producer_id,
        answer.producer_epoch,
        getattr(answer, "ongoing_txn_producer_id", -1),
        getattr(answer, "ongoing_txn_producer_epoch", -1),
    )


def add_partitions_request(
    transactional_id: str,
    producer_id: int,
    epoch: int,
    topic: str,
    partitions: Sequence[int],
    version: int,
) -> AddPartitionsToTxnRequest:
    """The client form (v3 and below) of AddPartitionsToTxn."""
    return AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=producer_id,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                name=topic, partitions=list(partitions)
            )
        ],
        version=version,
    )


def parse_add_partitions(answer: Any) -> dict[int, int]:
    """Partition -> error code."""
    return {
        p.partition_index: p.partition_error_code
        for t in answer.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def produce_request(
    transactional_id: str,
    producer_id: int,
    epoch: int,
    topic: str,
    records: Mapping[int, Sequence[Row]],
    *,
    base_sequence: int | Mapping[int, int],
    timestamp_ms: int,
    timeout_ms: int,
    version: int,
) -> ProduceRequest:
    """One transactional batch per partition (acks=all), each from ``base_sequence``
    (one for all, or per partition)."""
    data = []
    for partition, rows in sorted(records.items()):
        sequence = base_sequence if isinstance(base_sequence, int) else base_sequence[partition]
        batch = transactional_batch(
            rows,
            producer_id=producer_id,
            epoch=epoch,
            base_sequence=sequence,
            timestamp_ms=timestamp_ms,
            max_bytes=FETCH_MAX_BYTES,
            where=f"{topic}-{partition}",
        )
        data.append(
            ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=batch)
        )
    return ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=timeout_ms,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=data)],
        version=version,
    )


def parse_produce(answer: Any) -> dict[int, ProduceAnswer]:
    return {
        p.index: ProduceAnswer(p.error_code, p.base_offset)
        for t in answer.responses
        for p in t.partition_responses
    }


class EndTxnCall(NamedTuple):
    """One EndTxn's fields, in :func:`end_txn_request`'s order (for calls sent together)."""

    transactional_id: str
    producer_id: int
    epoch: int
    result: ControlType
    version: int


def end_txn_request(
    transactional_id: str, producer_id: int, epoch: int, result: ControlType, version: int
) -> EndTxnRequest:
    return EndTxnRequest(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=epoch,
        committed=result is ControlType.COMMIT,
        version=version,
    )


def parse_end_txn(answer: Any) -> int:
    """The error code: what it means is the controller's table (``END_TXN_ACTIONS``)."""
    return answer.error_code
