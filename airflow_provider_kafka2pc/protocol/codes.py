"""Kafka's error codes, as a table: the codes the project decides on, and where to ask again.

:class:`ErrorCode` is Kafka's own numbering. :data:`MOVED` is the one table of the answers
after which the request is not answered but worth sending again, once the partition's
leader or the transaction coordinator is looked up anew (a failover, see
:mod:`.failover`). What each call does with every other code is its caller's table (EndTxn's
is ``END_TXN_ACTIONS`` in :mod:`..transaction.controller`).
"""

from __future__ import annotations

import enum

import kafka.errors as kafka_errors


class ErrorCode(enum.IntEnum):
    """The Kafka error codes the transaction logic decides on (Kafka's own numbering)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    REPLICA_NOT_AVAILABLE = 9
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_VERSION = 35
    TRANSACTIONAL_ID_NOT_FOUND = 105
    KAFKA_STORAGE_ERROR = 56
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    OFFSET_NOT_AVAILABLE = 78
    PRODUCER_FENCED = 90


class Moved(enum.Enum):
    """Who is elsewhere, or not ready yet, after an answer: look it up again and ask it."""

    #: A partition's leader (fetch and metadata answers): it moved or is not elected yet.
    LEADER = "leader"
    #: A transaction coordinator: it moved or is still loading its state.
    COORDINATOR = "coordinator"


#: The answers that are no answer yet, by whom to look up again before asking again.
MOVED: dict[ErrorCode, Moved] = {
    ErrorCode.LEADER_NOT_AVAILABLE: Moved.LEADER,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: Moved.LEADER,
    ErrorCode.REPLICA_NOT_AVAILABLE: Moved.LEADER,
    ErrorCode.KAFKA_STORAGE_ERROR: Moved.LEADER,
    ErrorCode.FENCED_LEADER_EPOCH: Moved.LEADER,
    ErrorCode.UNKNOWN_LEADER_EPOCH: Moved.LEADER,
    ErrorCode.OFFSET_NOT_AVAILABLE: Moved.LEADER,
    ErrorCode.REQUEST_TIMED_OUT: Moved.LEADER,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: Moved.COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: Moved.COORDINATOR,
    ErrorCode.NOT_COORDINATOR: Moved.COORDINATOR,
}

#: Fetch and metadata answers after which a partition's leader is elsewhere or not elected
#: yet: look the leader up again and ask it.
LEADER_MOVED: frozenset[int] = frozenset(c for c, m in MOVED.items() if m is Moved.LEADER)
#: Coordinator answers after which it is elsewhere or still loading: find it again.
COORDINATOR_MOVED: frozenset[int] = frozenset(c for c, m in MOVED.items() if m is Moved.COORDINATOR)


def error_name(code: int) -> str:
    """Kafka's name for an error code, also for codes outside :class:`ErrorCode`."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return kafka_errors.for_code(code).__name__
