"""Metadata and FindCoordinator: where a partition's leader and a transaction's
coordinator are. Pure builders and parsers; any node answers them (see :mod:`.transport`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.metadata.metadata import MetadataRequest

from ..errors import BrokerMovedError, ProtocolError
from .codes import LEADER_MOVED, error_name

TRANSACTION_COORDINATOR = 1  # FindCoordinator key type
#: Kafka's AclOperation code for WRITE: its bit in Metadata's topic_authorized_operations
#: (Metadata v8+ with include_topic_authorized_operations, KIP-430).
ACL_OPERATION_WRITE = 4


def metadata_request(topic: str, version: int) -> MetadataRequest:
    return MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
        allow_auto_topic_creation=False,
        version=version,
        **({"include_topic_authorized_operations": True} if version >= 8 else {}),
    )


def parse_partition_leaders(answer: Any, topic: str, *, for_write: bool) -> dict[int, int]:
    """Partition -> leader node id; BrokerMovedError while a leader moves, ProtocolError for
    an unknown topic, or one this principal may see but not write (``for_write``)."""
    for entry in answer.topics:
        if entry.error_code in LEADER_MOVED:
            name = error_name(entry.error_code)
            raise BrokerMovedError(f"metadata of topic {topic!r}: {name}", name)
        if entry.error_code:
            raise ProtocolError(
                f"topic {topic!r}: {error_name(entry.error_code)}", error_name(entry.error_code)
            )
        # kafka-python decodes the bitfield as the set of bits set; None when omitted.
        allowed = getattr(entry, "authorized_operations", None)
        if for_write and allowed is not None and ACL_OPERATION_WRITE not in allowed:
            raise ProtocolError(
                f"topic {topic!r}: visible but not writable (no WRITE among the "
                "operations the broker allows this principal)",
                "TOPIC_AUTHORIZATION_FAILED",
            )
        return {p.partition_index: p.leader_id for p in entry.partitions}
    raise ProtocolError(f"topic {topic!r}: not in metadata", "UNKNOWN_TOPIC_OR_PARTITION")


def find_coordinator_request(transactional_id: str, version: int) -> FindCoordinatorRequest:
    return FindCoordinatorRequest(
        key=transactional_id,
        key_type=TRANSACTION_COORDINATOR,
        coordinator_keys=[transactional_id],
        version=version,
    )


#: FindCoordinator v4+ (KIP-699) takes several keys; the most asked in one request.
COORDINATOR_KEYS_PER_REQUEST = 1000


def find_coordinators_request(
    transactional_ids: Sequence[str], version: int
) -> FindCoordinatorRequest:
    """One FindCoordinator for several ids (v4+ only)."""
    if version < 4:
        raise ValueError(f"FindCoordinator v{version} takes one key; v4+ takes several")
    return FindCoordinatorRequest(
        key_type=TRANSACTION_COORDINATOR,
        coordinator_keys=list(transactional_ids),
        version=version,
    )


def parse_find_coordinators(answer: Any) -> dict[str, tuple[int, int]]:
    """Id -> (error code, coordinator node id), from a v4+ answer."""
    return {entry.key: (entry.error_code, entry.node_id) for entry in answer.coordinators}


def parse_find_coordinator(answer: Any, version: int) -> tuple[int, int]:
    """(error code, coordinator node id); v4+ answers per key, one key here."""
    if version >= 4:
        entry = answer.coordinators[0]
        return entry.error_code, entry.node_id
    return answer.error_code, answer.node_id
