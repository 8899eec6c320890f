"""The client: one control-plane connection to a Kafka cluster, a thin send per call.

Each call chooses its request version (the highest one both kafka-python and the broker
offer, capped where correctness demands it: :mod:`.versions`), builds the request with the
call's pure builder, sends it through the :mod:`.transport`, and hands the answer to the
call's pure parser. Everything above (controller, audit, CLI) works with plain integers,
enums and dataclasses, so a scripted stand-in for :class:`KafkaProtocol` can replace the
broker in tests (:mod:`.seam`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from .. import defaults
from ..connection.settings import bootstrap_servers, to_kafka_python
from ..connection.tls import check_tls
from ..errors import ConnectionLostError, ProtocolError, UnsupportedError
from .admin import Admin
from .codes import ErrorCode
from .configs import ConfigEntry, describe_topic_configs_request, parse_topic_configs
from .described import DescribedTransaction, ListedTransaction
from .failover import Failover
from .fetch import FETCH_MAX_BYTES, FetchAnswer, fetch_request, parse_fetch
from .metadata import (
    COORDINATOR_KEYS_PER_REQUEST,
    find_coordinator_request,
    find_coordinators_request,
    metadata_request,
    parse_find_coordinator,
    parse_find_coordinators,
    parse_partition_leaders,
)
from .offsets import log_start_request, parse_log_start
from .producer import (
    EndTxnCall,
    InitProducerIdAnswer,
    ProduceAnswer,
    add_partitions_request,
    end_txn_request,
    init_producer_id_request,
    parse_add_partitions,
    parse_end_txn,
    parse_init_producer_id,
    parse_produce,
    produce_request,
)
from .records import ControlType, Row
from .transport import Transport
from .versions import (
    CLASSIC_PRODUCE_MAX_VERSION,
    CLIENT_ADD_PARTITIONS_MAX_VERSION,
    INIT_PRODUCER_ID_2PC_VERSION,
    KIP890_PRODUCE_VERSION,
    ApiKey,
    highest_common,
)

#: Requests on one connection at once when sent together (:meth:`KafkaProtocol.end_txns`).
IN_FLIGHT_REQUESTS = 16


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
        servers = bootstrap_servers(config)
        self._timeout_ms = timeout_ms
        # A TLS problem is named now: kafka-python would retry the handshake until the
        # timeout and then report no broker at all.
        check_tls(config, min(timeout_ms / 1000, 10.0))
        kp_config = to_kafka_python(config)
        kp_config.setdefault("request_timeout_ms", timeout_ms)
        # Room for a full fetch answer (kafka-python's default frame limit is 1 MB).
        kp_config.setdefault("receive_message_max_bytes", 2 * FETCH_MAX_BYTES)
        kp_config.setdefault("socket_connection_setup_timeout_ms", min(timeout_ms, 10_000))
        # Requests sent together (the commit's EndTxns): every other call waits for its
        # answer before the next, so this never reorders anything.
        kp_config.setdefault("max_in_flight_requests_per_connection", IN_FLIGHT_REQUESTS)
        self._transport = Transport(
            kp_config, servers=servers, user=config.get("sasl.username"), timeout_ms=timeout_ms
        )
        self._client = self._transport.client
        self._admin = Admin(kp_config, dict(config), failover or Failover())

    # -- plumbing -----------------------------------------------------------

    def close(self) -> None:
        self._admin.close()
        self._transport.close()

    def __enter__(self) -> KafkaProtocol:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def api_version(self, api: ApiKey, cap: int | None = None) -> int | None:
        """Highest version both sides offer (at most ``cap``), or None if the broker lacks it."""
        return highest_common(api, self._transport.offered(api), cap)

    def _require(self, api: ApiKey, cap: int | None = None, minimum: int = 0) -> int:
        version = self.api_version(api, cap)
        if version is None or version < minimum:
            raise UnsupportedError(f"the broker does not offer {api.name} (v{minimum}+)")
        return version

    # -- coordinator --------------------------------------------------------

    def find_transaction_coordinator(self, transactional_id: str) -> tuple[int, int]:
        """Return (error code, coordinator node id)."""
        version = self._require(ApiKey.FIND_COORDINATOR, cap=4, minimum=1)
        answer = self._transport.send_any(find_coordinator_request(transactional_id, version))
        return parse_find_coordinator(answer, version)

    def find_transaction_coordinators(
        self, transactional_ids: Sequence[str]
    ) -> dict[str, tuple[int, int]]:
        """Id -> (error code, coordinator node id) for many ids: one FindCoordinator per
        thousand ids where the broker takes several keys (v4+, KIP-699), else one per id."""
        version = self._require(ApiKey.FIND_COORDINATOR, cap=4, minimum=1)
        ids = list(dict.fromkeys(transactional_ids))
        if version < 4:
            return {tid: self.find_transaction_coordinator(tid) for tid in ids}
        found: dict[str, tuple[int, int]] = {}
        step = COORDINATOR_KEYS_PER_REQUEST
        for chunk in (ids[i : i + step] for i in range(0, len(ids), step)):
            answer = self._transport.send_any(find_coordinators_request(chunk, version))
            found.update(parse_find_coordinators(answer))
        return found

    def end_txn(
        self,
        node: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        result: ControlType,
        version: int,
    ) -> int:
        request = end_txn_request(transactional_id, producer_id, epoch, result, version)
        return parse_end_txn(self._transport.send(node, request))

    def end_txns(
        self, batches: Mapping[int, Sequence[EndTxnCall]]
    ) -> dict[int, list[int | ConnectionLostError]]:
        """EndTxn for many transactions, per coordinator node, sent without waiting for each
        answer and to every node at once; per node, each answer's error code, or the lost
        connection that left it unanswered."""
        answers = self._transport.send_all(
            {node: [end_txn_request(*call) for call in calls] for node, calls in batches.items()}
        )
        return {
            node: [a if isinstance(a, ConnectionLostError) else parse_end_txn(a) for a in got]
            for node, got in answers.items()
        }

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
        request = init_producer_id_request(
            transactional_id,
            transaction_timeout_ms,
            version,
            enable_2pc=enable_2pc,
            keep_prepared_txn=keep_prepared_txn,
        )
        return parse_init_producer_id(self._transport.send(node, request))

    def offers_kip939(self) -> bool:
        """True when the broker's ApiVersions offer InitProducerId v6 (KIP-939).

        Whether ``transaction.two.phase.commit.enable`` is also on shows only in the
        answer to an InitProducerId with ``enable_2pc`` (docs/kip-939.md).
        """
        version = self.api_version(ApiKey.INIT_PRODUCER_ID)
        return version is not None and version >= INIT_PRODUCER_ID_2PC_VERSION

    # -- transactional writes at protocol level -----------------------------
    # For probes and tests of what a broker answers (KIP-890 and KIP-939 transactions,
    # which librdkafka cannot write); the data plane itself is librdkafka
    # (transaction/writer.py).

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
        request = add_partitions_request(
            transactional_id, producer_id, epoch, topic, partitions, version
        )
        return parse_add_partitions(self._transport.send(node, request))

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
        request = produce_request(
            transactional_id,
            producer_id,
            epoch,
            topic,
            records,
            base_sequence=base_sequence,
            timestamp_ms=int(time.time() * 1000),
            timeout_ms=self._timeout_ms,
            version=version,
        )
        return parse_produce(self._transport.send(node, request))

    # -- log ----------------------------------------------------------------

    def partition_leaders(
        self, topic: str, *, for_write: bool = False, wait_s: float = 0.0
    ) -> dict[int, int]:
        """Partition -> leader node id; raises ProtocolError for an unknown topic.

        ``for_write``: also TOPIC_AUTHORIZATION_FAILED when this principal may see the topic
        but not WRITE it (Metadata v8+ reports the operations the principal is allowed):
        the writer would otherwise learn it only from a failed AddPartitionsToTxn, which
        librdkafka reports as purged records.

        ``wait_s``: ask again for that long while the broker does not know the topic or
        its leaders yet (:func:`asked_until_known`), for a check that must not refuse a
        topic created just before (:data:`~..defaults.TOPIC_WAIT_S`).
        """
        version = self._require(ApiKey.METADATA, cap=8, minimum=4)

        def ask() -> dict[int, int]:
            answer = self._transport.send_any(metadata_request(topic, version))
            return parse_partition_leaders(answer, topic, for_write=for_write)

        return asked_until_known(ask, wait_s)

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
        request = fetch_request(
            topic, partition, offset, max_wait_ms=max_wait_ms, max_bytes=max_bytes, version=version
        )
        answer = self._transport.send(node, request)
        return parse_fetch(answer, with_keys=with_keys, with_records=with_records)

    def log_start_offset(self, node: int, topic: str, partition: int) -> tuple[int, int]:
        """(error code, where the partition's log starts now) from its leader ``node``
        (ListOffsets, earliest): past offset 0 once retention or DeleteRecords removed
        records."""
        version = self._require(ApiKey.LIST_OFFSETS, minimum=1)
        return parse_log_start(
            self._transport.send(node, log_start_request(topic, partition, version))
        )

    def describe_topic_configs(
        self, topics: Sequence[str], names: Sequence[str] | None = None
    ) -> dict[str, dict[str, ConfigEntry]]:
        """Topic -> setting -> its effective value and source (DescribeConfigs v1+, asked of
        any node: every broker answers for topics); ``names``: only those settings.
        ProtocolError naming a topic the broker refuses or does not know."""
        version = self._require(ApiKey.DESCRIBE_CONFIGS, minimum=1)
        request = describe_topic_configs_request(topics, names, version)
        return parse_topic_configs(self._transport.send_any(request))

    # -- admin (feature-detected) -------------------------------------------

    def create_topic(self, topic: str, partitions: int) -> None:
        self._admin.create_topic(topic, partitions)

    def list_transactions(
        self, prefix: str | None = None, states: Sequence[str] | None = None
    ) -> list[ListedTransaction]:
        """Transactions the coordinators know, optionally those whose id starts with ``prefix``.

        The prefix goes to the broker as an id pattern where ListTransactions v2 (Kafka
        4.1+, KIP-1152) offers one; older brokers list everything and we filter here.
        ``filtered_by`` in each row says which.
        """
        version = self._require(ApiKey.LIST_TRANSACTIONS)
        return self._admin.list_transactions(prefix, states, pattern_on_broker=version >= 2)

    def describe_transactions(self, transactional_ids: list[str]) -> list[DescribedTransaction]:
        self._require(ApiKey.DESCRIBE_TRANSACTIONS)
        return self._admin.describe_transactions(transactional_ids)

    def describe_transaction(self, transactional_id: str) -> DescribedTransaction | None:
        """One id as :meth:`describe_transactions` shows it; None when the coordinator
        does not know it (TRANSACTIONAL_ID_NOT_FOUND)."""
        try:
            return self.describe_transactions([transactional_id])[0]
        except ProtocolError as exc:
            if exc.error_name == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND.name:
                return None
            raise


T = TypeVar("T")

#: What a broker answers for a topic it has not learnt of yet, or whose leaders it has not.
_NOT_YET = frozenset({"UNKNOWN_TOPIC_OR_PARTITION", "LEADER_NOT_AVAILABLE"})


def asked_until_known(ask: Callable[[], T], wait_s: float) -> T:
    """``ask()``, asked again every 0.2 s for up to ``wait_s`` while it raises that the
    broker does not know the topic yet: Kafka's AdminClient says brokers may learn of a new
    topic seconds after CreateTopics succeeded, and Java's producer waits for a topic's
    metadata likewise. Any other refusal, or one still there at the bound, is raised."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return ask()
        except ProtocolError as exc:
            if exc.error_name not in _NOT_YET or time.monotonic() >= deadline:
                raise
        time.sleep(0.2)
