"""The one module that speaks the Kafka protocol directly (through kafka-python 3.0.x).

Everything above this module (controller, audit, CLI) works with plain integers,
enums and dataclasses, so a scripted stand-in for :class:`KafkaProtocol` can replace
the broker in tests for the answers the embedded broker cannot produce.

Requests are built from kafka-python's generated message classes; the request
version is the highest one both kafka-python and the broker offer, capped where
correctness demands it (EndTxn for librdkafka's classic transactions).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import kafka.errors as kafka_errors
from kafka.admin import KafkaAdminClient
from kafka.net.compat import KafkaNetClient
from kafka.net.sasl import get_sasl_mechanism
from kafka.net.transport import KafkaSSLTransport
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.parser import KafkaProtocol as FrameParser
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from .. import defaults
from ..connection.acls import authorization_error
from ..connection.settings import bootstrap_servers, to_kafka_python
from ..connection.tls import check_tls
from ..errors import (
    AuthorizationError,
    BrokerMovedError,
    BrokerUnreachableError,
    ConfigurationError,
    ConnectionLostError,
    ProtocolError,
    UnsupportedError,
)
from ..naming import java_prefix_pattern
from .described import CoordinatorTxnState, DescribedTransaction, ListedTransaction
from .failover import Failover

log = logging.getLogger(__name__)

T = TypeVar("T")

TRANSACTION_COORDINATOR = 1  # FindCoordinator key type
READ_UNCOMMITTED = 0
FETCH_MAX_BYTES = 8 * 1024 * 1024
#: InitProducerId v6 carries KIP-939's Enable2Pc and KeepPreparedTxn.
INIT_PRODUCER_ID_2PC_VERSION = 6
#: Produce inside a classic (TV1) transaction: at most v11. v12 means KIP-890 (TV2):
#: the broker adds the partition to the transaction itself (no AddPartitionsToTxn).
CLASSIC_PRODUCE_MAX_VERSION = 11
KIP890_PRODUCE_VERSION = 12
#: AddPartitionsToTxn v4+ is the broker-to-broker form; clients send at most v3.
CLIENT_ADD_PARTITIONS_MAX_VERSION = 3
#: Kafka's AclOperation code for WRITE: its bit in Metadata's topic_authorized_operations
#: (Metadata v8+ with include_topic_authorized_operations, KIP-430).
ACL_OPERATION_WRITE = 4


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


#: Fetch and metadata answers after which a partition's leader is elsewhere or not elected
#: yet: look the leader up again and ask it (a failover, see ``failover.py``).
LEADER_MOVED: frozenset[int] = frozenset(
    {
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.REQUEST_TIMED_OUT,
    }
)
#: Coordinator answers after which it is elsewhere or still loading: find it again.
COORDINATOR_MOVED: frozenset[int] = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    }
)


def error_name(code: int) -> str:
    """Kafka's name for an error code, also for codes outside :class:`ErrorCode`."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return kafka_errors.for_code(code).__name__


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    METADATA = 3
    FIND_COORDINATOR = 10
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    END_TXN = 26
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


class ControlType(enum.IntEnum):
    """Transaction marker written into each partition at the end of a transaction."""

    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True)
class LoggedRecord:
    """One data record as the log holds it: what a loss repair copies (log_copy)."""

    offset: int
    #: The record's timestamp in epoch ms (CreateTime as the writer set it, or the
    #: broker's LogAppendTime when the topic says so: see ``RecordBatch.log_append_time``).
    timestamp: int
    key: bytes | None
    #: None for a tombstone.
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True)
class RecordBatch:
    """One record batch as stored in a partition's log: header fields, and the keys or
    the whole records when asked for."""

    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    is_transactional: bool
    control: ControlType | None
    record_count: int
    keys: tuple[bytes | None, ...] = ()
    #: Records whose value is null (tombstones); counted only when keys are read.
    tombstones: int = 0
    #: The data records, decoded (decompressed), only when asked for (``with_records``).
    records: tuple[LoggedRecord, ...] = ()
    #: The batch's timestamps are the broker's (LogAppendTime), not the writer's.
    log_append_time: bool = False


@dataclass(frozen=True)
class FetchAnswer:
    """One partition's fetch answer: error code, the broker's high watermark, the batches."""

    error: int
    high_watermark: int
    batches: list[RecordBatch]


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


class TransactionProtocol(Protocol):
    """What the controller and the audit need from a broker; scripted in tests."""

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

    def close(self) -> None: ...


#: A record at protocol level: (key, value) or (key, value, headers).
Row = (
    tuple[bytes | None, bytes | None]
    | tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]] | None]
)


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


class KafkaProtocol:
    """A control-plane connection to a Kafka cluster.

    :param config: librdkafka-style settings (``bootstrap.servers``, security, SASL, SSL).
    :param timeout_ms: bound on connecting and on each request.
    :param failover: how long and how often the admin calls it makes itself
        (Describe/ListTransactions) ask again through a failover
        (:data:`~..defaults.FINISH_DEADLINE_S` by default).
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        timeout_ms: int = defaults.REQUEST_TIMEOUT_MS,
        failover: Failover | None = None,
    ) -> None:
        self._servers = bootstrap_servers(config)
        self._config = dict(config)
        self._timeout_ms = timeout_ms
        self._failover = failover or Failover()
        # A TLS problem is named now: kafka-python would retry the handshake until the
        # timeout and then report no broker at all.
        check_tls(config, min(timeout_ms / 1000, 10.0))
        self._kp_config = to_kafka_python(config)
        self._kp_config.setdefault("request_timeout_ms", timeout_ms)
        # Room for a full fetch answer (kafka-python's default frame limit is 1 MB).
        self._kp_config.setdefault("receive_message_max_bytes", 2 * FETCH_MAX_BYTES)
        self._kp_config.setdefault("socket_connection_setup_timeout_ms", min(timeout_ms, 10_000))
        self._client = KafkaNetClient(**self._kp_config)
        self._admin: KafkaAdminClient | None = None
        try:
            self._client.check_version(timeout_ms=timeout_ms)
        except kafka_errors.KafkaError as exc:
            self._client.close()
            refusal = sasl_refusal(self._kp_config, min(timeout_ms / 1000, 10.0))
            if refusal is not None:
                raise ConfigurationError(
                    f"authentication failed for user {config.get('sasl.username')!r} "
                    f"({self._kp_config['sasl_mechanism']}) at {self._servers}: {refusal}; "
                    "check sasl.username, sasl.password and sasl.mechanism"
                ) from None
            raise BrokerUnreachableError(
                f"no Kafka broker answered at {self._servers} within {timeout_ms} ms "
                f"({type(exc).__name__})"
            ) from None

    # -- plumbing -----------------------------------------------------------

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
        self._client.close()

    def __enter__(self) -> KafkaProtocol:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send_any(self, request: Any) -> Any:
        """Send a request any broker can answer (Metadata, FindCoordinator): to the least
        loaded node, then, while connections are lost, to each other known node in turn.

        A node killed a moment ago stays in the cluster's metadata until the controller
        fences it (``broker.session.timeout.ms``); Kafka's own clients route around it,
        and so must we: one node down during a rolling restart is not an error. Only
        when no node answers is the connection lost.

        A node that does not answer at all (paused: its connection stays open) gets at
        most :data:`~..defaults.ANY_NODE_ATTEMPT_MS` while another node is left to ask;
        the last one gets the whole request timeout.
        """
        tried: list[int | str] = []
        last: ConnectionLostError | None = None
        while True:
            node = self._untried_node(tried)
            if node is None:
                raise ConnectionLostError(
                    f"{request.__class__.__name__}: no Kafka node answered "
                    f"(tried {', '.join(map(str, tried))}); last: {last}"
                )
            others = self._untried_node([*tried, node]) is not None
            bound = min(self._timeout_ms, defaults.ANY_NODE_ATTEMPT_MS) if others else None
            try:
                return self._send(node, request, timeout_ms=bound)
            except ConnectionLostError as exc:
                last = exc
                tried.append(node)
                log.info("%s; asking another node", exc)

    def _untried_node(self, tried: Sequence[int | str]) -> int | str | None:
        """The least loaded node if not tried yet, else any known node not tried yet
        (kafka-python's choice skips a node only while its reconnect backoff lasts)."""
        least = self._client.least_loaded_node(bootstrap_fallback=True)
        if least is not None and least not in tried:
            return least
        cluster = self._client.cluster
        known = sorted(b.node_id for b in cluster.brokers()) or [
            b.node_id for b in cluster.bootstrap_brokers()
        ]
        return next((node for node in known if node not in tried), None)

    def _send(self, node: int | str, request: Any, timeout_ms: int | None = None) -> Any:
        try:
            return self._client.send_and_receive(
                node, request, timeout_ms=timeout_ms or self._timeout_ms
            )
        except (
            kafka_errors.KafkaConnectionError,
            kafka_errors.KafkaTimeoutError,
            kafka_errors.NodeNotReadyError,
            kafka_errors.RequestTimedOutError,
            kafka_errors.Cancelled,
            ConnectionError,
        ) as exc:
            waited = f" within {timeout_ms} ms" if timeout_ms else ""
            raise ConnectionLostError(
                f"{request.__class__.__name__} to node {node}{self._address(node)}: "
                f"{type(exc).__name__}{waited}"
            ) from None

    def _address(self, node: int | str) -> str:
        """`` at host:port`` of a node the client knows, for error texts; else empty."""
        broker = self._client.cluster.broker_metadata(node)
        return f" at {broker.host}:{broker.port}" if broker is not None else ""

    def api_version(self, api: ApiKey, cap: int | None = None) -> int | None:
        """Highest version both sides offer (at most ``cap``), or None if the broker lacks it."""
        broker = self._client._manager.broker_version_data.api_versions.get(int(api))
        if broker is None:
            return None
        library = {
            ApiKey.FETCH: FetchRequest,
            ApiKey.METADATA: MetadataRequest,
            ApiKey.FIND_COORDINATOR: FindCoordinatorRequest,
            ApiKey.INIT_PRODUCER_ID: InitProducerIdRequest,
            ApiKey.END_TXN: EndTxnRequest,
            ApiKey.PRODUCE: ProduceRequest,
            ApiKey.ADD_PARTITIONS_TO_TXN: AddPartitionsToTxnRequest,
        }.get(api)
        top = broker[1] if library is None else min(broker[1], library.max_version)
        if cap is not None:
            top = min(top, cap)
        return top if top >= broker[0] else None

    def _require(self, api: ApiKey, cap: int | None = None, minimum: int = 0) -> int:
        version = self.api_version(api, cap)
        if version is None or version < minimum:
            raise UnsupportedError(f"the broker does not offer {api.name} (v{minimum}+)")
        return version

    # -- coordinator --------------------------------------------------------

    def find_transaction_coordinator(self, transactional_id: str) -> tuple[int, int]:
        """Return (error code, coordinator node id)."""
        version = self._require(ApiKey.FIND_COORDINATOR, cap=4, minimum=1)
        request = FindCoordinatorRequest(
            key=transactional_id,
            key_type=TRANSACTION_COORDINATOR,
            coordinator_keys=[transactional_id],
            version=version,
        )
        answer = self._send_any(request)
        if version >= 4:
            entry = answer.coordinators[0]
            return entry.error_code, entry.node_id
        return answer.error_code, answer.node_id

    def end_txn(
        self,
        node: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        result: ControlType,
        version: int,
    ) -> int:
        request = EndTxnRequest(
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=epoch,
            committed=result is ControlType.COMMIT,
            version=version,
        )
        return self._send(node, request).error_code

    def init_producer_id(
        self,
        node: int,
        transactional_id: str,
        transaction_timeout_ms: int,
        *,
        enable_2pc: bool = False,
        keep_prepared_txn: bool = False,
        version: int | None = None,
    ) -> InitProducerIdAnswer:
        """InitProducerId for ``transactional_id``; without keep_prepared_txn it aborts
        (fences) whatever the id left open.

        ``enable_2pc`` and ``keep_prepared_txn`` are KIP-939's fields, which need v6; a
        released broker offers v6 only with ``unstable.api.versions.enable`` (see
        docs/kip-939.md). ``version`` forces a request version, for probes: a broker
        drops the connection on a version it does not offer (``ConnectionLostError``).
        """
        if version is None:
            if enable_2pc or keep_prepared_txn:
                version = self._require(
                    ApiKey.INIT_PRODUCER_ID, minimum=INIT_PRODUCER_ID_2PC_VERSION
                )
            else:
                # v3+ carries producer id/epoch for KIP-360 recovery; we fence with a
                # fresh init (-1/-1), which every broker treats as "abort what is open".
                version = self._require(ApiKey.INIT_PRODUCER_ID, cap=5)
        kip939: dict[str, bool] = {}
        if version >= INIT_PRODUCER_ID_2PC_VERSION:
            kip939 = {"enable2_pc": enable_2pc, "keep_prepared_txn": keep_prepared_txn}
        elif enable_2pc or keep_prepared_txn:
            raise UnsupportedError(f"InitProducerId v{version} has no KIP-939 fields (v6+)")
        request = InitProducerIdRequest(
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
            producer_id=-1,
            producer_epoch=-1,
            version=version,
            **kip939,
        )
        answer = self._send(node, request)
        return InitProducerIdAnswer(
            answer.error_code,
            answer.producer_id,
            answer.producer_epoch,
            getattr(answer, "ongoing_txn_producer_id", -1),
            getattr(answer, "ongoing_txn_producer_epoch", -1),
        )

    def offers_kip939(self) -> bool:
        """True when the broker's ApiVersions offer InitProducerId v6 (KIP-939).

        Whether ``transaction.two.phase.commit.enable`` is also on shows only in the
        answer to an InitProducerId with ``enable_2pc`` (docs/kip-939.md).
        """
        version = self.api_version(ApiKey.INIT_PRODUCER_ID)
        return version is not None and version >= INIT_PRODUCER_ID_2PC_VERSION

    # -- transactional writes at protocol level -----------------------------
    # For probes and tests of what a broker answers (KIP-890 and KIP-939 transactions,
    # which librdkafka cannot write); the data plane itself is librdkafka (writer.py).

    def add_partitions_to_txn(
        self,
        node: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        topic: str,
        partitions: Sequence[int],
    ) -> dict[int, int]:
        """Add partitions to a classic (TV1) transaction; returns partition -> error code."""
        version = self._require(ApiKey.ADD_PARTITIONS_TO_TXN, cap=CLIENT_ADD_PARTITIONS_MAX_VERSION)
        request = AddPartitionsToTxnRequest(
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
        answer = self._send(node, request)
        return {
            p.partition_index: p.partition_error_code
            for t in answer.results_by_topic_v3_and_below
            for p in t.results_by_partition
        }

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
    ) -> dict[int, ProduceAnswer]:
        """Write one transactional batch per partition to their leader ``node`` (acks=all).

        ``kip890`` sends Produce v12, with which the broker adds each partition to the
        transaction itself (TV2); otherwise at most v11, after :meth:`add_partitions_to_txn`.
        Each batch starts at ``base_sequence``, one for all or per partition (0 for the
        first batch of an epoch, then the count of records the partition got before).
        A row may carry headers as a third element.
        """
        if kip890:
            version = self._require(
                ApiKey.PRODUCE, cap=KIP890_PRODUCE_VERSION, minimum=KIP890_PRODUCE_VERSION
            )
        else:
            version = self._require(ApiKey.PRODUCE, cap=CLASSIC_PRODUCE_MAX_VERSION, minimum=3)
        now_ms = int(time.time() * 1000)
        data = []
        for partition, rows in sorted(records.items()):
            sequence = base_sequence if isinstance(base_sequence, int) else base_sequence[partition]
            builder = DefaultRecordBatchBuilder(
                magic=2,
                compression_type=0,
                is_transactional=True,
                producer_id=producer_id,
                producer_epoch=epoch,
                base_sequence=sequence,
                batch_size=FETCH_MAX_BYTES,
            )
            for offset, row in enumerate(rows):
                headers = list(row[2] or ()) if len(row) > 2 else []
                if builder.append(offset, now_ms, row[0], row[1], headers) is None:
                    raise ValueError(
                        f"batch for {topic}-{partition} exceeds {FETCH_MAX_BYTES} bytes "
                        f"at record {offset}"
                    )
            data.append(
                ProduceRequest.TopicProduceData.PartitionProduceData(
                    index=partition, records=bytes(builder.build())
                )
            )
        request = ProduceRequest(
            transactional_id=transactional_id,
            acks=-1,
            timeout_ms=self._timeout_ms,
            topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=data)],
            version=version,
        )
        answer = self._send(node, request)
        return {
            p.index: ProduceAnswer(p.error_code, p.base_offset)
            for t in answer.responses
            for p in t.partition_responses
        }

    # -- log ----------------------------------------------------------------

    def partition_leaders(self, topic: str, *, for_write: bool = False) -> dict[int, int]:
        """Partition -> leader node id; raises ProtocolError for an unknown topic.

        ``for_write``: also TOPIC_AUTHORIZATION_FAILED when this principal may see the topic
        but not WRITE it (Metadata v8+ reports the operations the principal is allowed):
        the writer would otherwise learn it only from a failed AddPartitionsToTxn, which
        librdkafka reports as purged records.
        """
        version = self._require(ApiKey.METADATA, cap=8, minimum=4)
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
            allow_auto_topic_creation=False,
            version=version,
            **({"include_topic_authorized_operations": True} if version >= 8 else {}),
        )
        answer = self._send_any(request)
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

    def fetch(
        self,
        node: int,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_wait_ms: int,
        with_keys: bool = False,
        max_bytes: int = FETCH_MAX_BYTES,
        with_records: bool = False,
    ) -> FetchAnswer:
        """Read raw batches (control batches included) from ``offset``; ``with_records``
        decodes every data record too (kafka-python's record parser, any codec it has).

        A broker returns at least the batch holding ``offset`` even when it exceeds
        ``max_bytes``; a small ``max_bytes`` asks for little more than the high watermark.
        """
        version = self._require(ApiKey.FETCH, cap=11, minimum=4)
        fetch_topic = FetchRequest.FetchTopic
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_bytes=max_bytes,
            isolation_level=READ_UNCOMMITTED,
            session_id=0,
            session_epoch=-1,
            topics=[
                fetch_topic(
                    topic=topic,
                    partitions=[
                        fetch_topic.FetchPartition(
                            partition=partition,
                            fetch_offset=offset,
                            partition_max_bytes=max_bytes,
                            current_leader_epoch=-1,
                            log_start_offset=-1,
                        )
                    ],
                )
            ],
            forgotten_topics_data=[],
            version=version,
        )
        answer = self._send(node, request)
        for topic_answer in answer.responses:
            for part in topic_answer.partitions:
                if part.error_code:
                    return FetchAnswer(part.error_code, -1, [])
                batches = _parse_batches(part.records, with_keys, with_records)
                return FetchAnswer(ErrorCode.NONE, part.high_watermark, batches)
        return FetchAnswer(ErrorCode.NONE, -1, [])

    # -- admin (feature-detected) -------------------------------------------

    def _admin_client(self) -> KafkaAdminClient:
        if self._admin is None:
            accepted = KafkaAdminClient.DEFAULT_CONFIG
            self._admin = KafkaAdminClient(
                **{k: v for k, v in self._kp_config.items() if k in accepted}
            )
        return self._admin

    def _admin_call(self, what: str, call: Callable[[KafkaAdminClient], T]) -> T:
        """``call(admin)``, asked again through a failover.

        kafka-python's admin client finds coordinators and brokers itself and caches
        them; after an error kafka-python classes as retriable (a lost connection,
        NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...) the next attempt gets a fresh
        client, which bootstraps again from the surviving servers and forgets the dead
        coordinator. Other errors (an unknown id) propagate as they are.
        """

        def attempt() -> T:
            try:
                return call(self._admin_client())
            except (kafka_errors.KafkaError, ConnectionError) as exc:
                if not _retriable(exc):
                    raise
                self._drop_admin()
                raise ConnectionLostError(f"{what}: {type(exc).__name__} {exc}") from None

        return self._failover.run(what, attempt)

    def _refused(
        self, exc: BaseException, action: str, *, transactional_ids: Sequence[str] = ()
    ) -> AuthorizationError | None:
        """``exc`` as the :class:`AuthorizationError` it is, or None: kafka-python's admin
        client raises the broker's refusals as its own error classes."""
        return authorization_error(exc, self._config, action, transactional_ids=transactional_ids)

    def _drop_admin(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            with contextlib.suppress(Exception):
                admin.close()

    def create_topic(self, topic: str, partitions: int) -> None:
        try:
            self._admin_client().create_topics(
                {topic: {"num_partitions": partitions, "replication_factor": -1}}
            )
        except kafka_errors.TopicAlreadyExistsError:
            raise ProtocolError(f"topic {topic!r} already exists", "TOPIC_ALREADY_EXISTS") from None

    def list_transactions(
        self, prefix: str | None = None, states: Sequence[str] | None = None
    ) -> list[ListedTransaction]:
        """Transactions the coordinators know, optionally those whose id starts with ``prefix``.

        The prefix goes to the broker as an id pattern where ListTransactions v2 (Kafka
        4.1+, KIP-1152) offers one; older brokers list everything and we filter here.
        ``filtered_by`` in each row says which.
        """
        version = self._require(ApiKey.LIST_TRANSACTIONS)
        on_broker = prefix is not None and version >= 2
        try:
            by_broker = self._admin_call(
                "ListTransactions",
                lambda admin: admin.list_transactions(
                    state_filters=[str(s) for s in states] if states else None,
                    transactional_id_pattern=(
                        java_prefix_pattern(prefix) if on_broker and prefix else None
                    ),
                ),
            )
        except kafka_errors.KafkaError as exc:
            refused = self._refused(exc, "list transactions")
            if refused is None:
                raise
            raise refused from None
        rows = [
            ListedTransaction(
                broker=broker,
                transactional_id=t.transactional_id,
                producer_id=t.producer_id,
                state=CoordinatorTxnState.parse(t.state),
                filtered_by="broker" if on_broker else ("client" if prefix else None),
            )
            for broker, listings in by_broker.items()
            for t in listings
        ]
        if prefix is not None:
            rows = [r for r in rows if r.transactional_id.startswith(prefix)]
        return sorted(rows, key=lambda r: r.transactional_id)

    def describe_transactions(self, transactional_ids: list[str]) -> list[DescribedTransaction]:
        self._require(ApiKey.DESCRIBE_TRANSACTIONS)
        try:
            described = self._admin_call(
                f"DescribeTransactions of {list(transactional_ids)}",
                lambda admin: admin.describe_transactions(transactional_ids),
            )
        except kafka_errors.KafkaError as exc:
            refused = self._refused(exc, "describe", transactional_ids=transactional_ids)
            if refused is None:
                raise
            raise refused from None
        return [
            DescribedTransaction(
                transactional_id=tid,
                state=CoordinatorTxnState.parse(d.state),
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                coordinator=d.coordinator_id,
                transaction_timeout_ms=d.transaction_timeout_ms,
                transaction_start_time_ms=d.transaction_start_time_ms,
                partitions=tuple(sorted(f"{tp.topic}-{tp.partition}" for tp in d.topic_partitions)),
            )
            for tid, d in described.items()
        ]

    def describe_transaction(self, transactional_id: str) -> DescribedTransaction | None:
        """One id as :meth:`describe_transactions` shows it; None when the coordinator
        does not know it (TRANSACTIONAL_ID_NOT_FOUND)."""
        try:
            return self.describe_transactions([transactional_id])[0]
        except kafka_errors.TransactionalIdNotFoundError:
            return None


def sasl_refusal(kp_config: Mapping[str, Any], timeout_s: float) -> str | None:
    """Why the first bootstrap server refuses this SASL login; None if it accepts it or
    cannot be asked.

    kafka-python 3.0.12 never says: the broker answers SaslAuthenticate with an error and
    closes the connection, the transport reads both in one go and drops the answer
    (kafka/net/transport.py, _sock_recv), so a refused login looks like an unreachable
    broker. One blocking exchange, frame by frame, reads the answer.
    """
    security = str(kp_config.get("security_protocol"))
    if not security.startswith("SASL"):
        return None
    host, _, port = kp_config["bootstrap_servers"][0].rpartition(":")
    mechanism = kp_config.get("sasl_mechanism", "PLAIN")
    parser = FrameParser(client_id="kafka2pc-login-check")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
            if security == "SASL_SSL":
                ssl_config = {**KafkaSSLTransport.DEFAULT_CONFIG}
                ssl_config.update({k: v for k, v in kp_config.items() if k in ssl_config})
                context = KafkaSSLTransport._build_ssl_context(ssl_config)
                sock = context.wrap_socket(sock, server_hostname=host)

            def call(request: Any) -> Any:
                parser.send_request(request)
                sock.sendall(parser.send_bytes())
                while True:
                    data = sock.recv(65536)
                    if not data:
                        raise ConnectionError("closed by the broker")
                    for _, response in parser.receive_bytes(data):
                        return response

            handshake = call(SaslHandshakeRequest(version=1, mechanism=mechanism))
            if handshake.error_code:
                return f"the broker offers {', '.join(handshake.mechanisms)} only"
            login = get_sasl_mechanism(mechanism)(host=host, **kp_config)
            while not login.is_done():
                answer = call(SaslAuthenticateRequest(version=1, auth_bytes=login.auth_bytes()))
                if answer.error_code:
                    return answer.error_message or error_name(answer.error_code)
                login.receive(answer.auth_bytes)
    except (OSError, ValueError, kafka_errors.KafkaError):
        return None
    return None


def _retriable(exc: BaseException) -> bool:
    """Whether kafka-python (or the socket) says asking again may help."""
    if isinstance(exc, ConnectionError):
        return True
    if isinstance(exc, kafka_errors.UnknownTopicOrPartitionError):
        return False
    return bool(getattr(exc, "retriable", False)) or isinstance(
        exc, kafka_errors.UnknownBrokerIdError
    )


def _parse_batches(
    raw: bytes | None, with_keys: bool, with_records: bool = False
) -> list[RecordBatch]:
    if not raw:
        return []
    records = MemoryRecords(raw)
    out: list[RecordBatch] = []
    while (batch := records.next_batch()) is not None:
        control = None
        keys: tuple[bytes | None, ...] = ()
        tombstones = 0
        logged: tuple[LoggedRecord, ...] = ()
        if batch.is_control_batch:
            control = next((ControlType(r.type) for r in batch), None)
        elif with_keys or with_records:
            rows = list(batch)
            keys = tuple(r.key for r in rows)
            tombstones = sum(1 for r in rows if r.value is None)
            if with_records:
                logged = tuple(
                    LoggedRecord(r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
                    for r in rows
                )
        out.append(
            RecordBatch(
                base_offset=batch.base_offset,
                last_offset=batch.last_offset,
                producer_id=batch.producer_id,
                producer_epoch=batch.producer_epoch,
                is_transactional=batch.is_transactional,
                control=control,
                record_count=batch.records_count,
                keys=keys,
                tombstones=tombstones,
                records=logged,
                log_append_time=batch.timestamp_type == 1,
            )
        )
    return out
