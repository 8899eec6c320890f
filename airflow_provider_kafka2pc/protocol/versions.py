"""The APIs the project calls and the request versions it may send.

The version sent is the highest one both kafka-python and the broker offer, capped where
correctness demands it (:func:`highest_common`); the caps are here, with why.
"""

from __future__ import annotations

import enum

from kafka.protocol.admin.configs import DescribeConfigsRequest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    FIND_COORDINATOR = 10
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    END_TXN = 26
    DESCRIBE_CONFIGS = 32
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


#: InitProducerId v6 carries KIP-939's Enable2Pc and KeepPreparedTxn.
INIT_PRODUCER_ID_2PC_VERSION = 6
#: Produce inside a classic (TV1) transaction: at most v11. v12 means KIP-890 (TV2):
#: the broker adds the partition to the transaction itself (no AddPartitionsToTxn).
CLASSIC_PRODUCE_MAX_VERSION = 11
KIP890_PRODUCE_VERSION = 12
#: AddPartitionsToTxn v4+ is the broker-to-broker form; clients send at most v3.
CLIENT_ADD_PARTITIONS_MAX_VERSION = 3

#: The requests this package builds itself, by API: kafka-python's highest version of
#: each bounds what may be sent. The others go through kafka-python's admin client.
REQUESTS: dict[ApiKey, type] = {
    ApiKey.FETCH: FetchRequest,
    ApiKey.LIST_OFFSETS: ListOffsetsRequest,
    ApiKey.METADATA: MetadataRequest,
    ApiKey.FIND_COORDINATOR: FindCoordinatorRequest,
    ApiKey.INIT_PRODUCER_ID: InitProducerIdRequest,
    ApiKey.END_TXN: EndTxnRequest,
    ApiKey.PRODUCE: ProduceRequest,
    ApiKey.ADD_PARTITIONS_TO_TXN: AddPartitionsToTxnRequest,
    ApiKey.DESCRIBE_CONFIGS: DescribeConfigsRequest,
}


def highest_common(api: ApiKey, offered: tuple[int, int] | None, cap: int | None) -> int | None:
    """The highest version both sides offer (at most ``cap``), or None if the broker lacks
    the API; ``offered`` is the broker's (min, max) from ApiVersions."""
    if offered is None:
        return None
    library = REQUESTS.get(api)
    top = offered[1] if library is None else min(offered[1], library.max_version)
    if cap is not None:
        top = min(top, cap)
    return top if top >= offered[0] else None
