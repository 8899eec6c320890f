"""The KIP-939 switch: native 2PC where the broker grants it, the classic path elsewhere.

Scripted at the protocol seam (answers a released broker never gives, and failures),
then live: the session brokers (no unstable APIs) take the classic path; a private
4.4.0 broker with 2PC and unstable API versions keeps a native prepared transaction
open past its maximum transaction timeout until another process commits it.
Findings behind the switch: docs/kip-939.md.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from airflow_provider_kafka2pc.errors import (
    CommittableError,
    ConfigurationError,
    ConnectionLostError,
    ProtocolError,
    UnsupportedError,
    WriteError,
)
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.protocol.codes import ErrorCode
from airflow_provider_kafka2pc.protocol.described import CoordinatorTxnState, DescribedTransaction
from airflow_provider_kafka2pc.protocol.producer import InitProducerIdAnswer, ProduceAnswer
from airflow_provider_kafka2pc.protocol.records import ControlType, RecordBatch
from airflow_provider_kafka2pc.protocol.versions import ApiKey
from airflow_provider_kafka2pc.transaction.audit import audit_topic
from airflow_provider_kafka2pc.transaction.committable import (
    TRANSACTION_VERSION_CLASSIC,
    TWO_PHASE_TIMEOUT_MS,
    Committable,
)
from airflow_provider_kafka2pc.transaction.controller import (
    Outcome,
    RetryPolicy,
    TransactionController,
)
from airflow_provider_kafka2pc.transaction.log import LogReader, marker_views
from airflow_provider_kafka2pc.transaction.native_writer import (
    NativeWriter,
    murmur2,
    partition_for_key,
)
from airflow_provider_kafka2pc.transaction.two_phase import TwoPhaseMode, detect_two_phase
from devtools.broker import DEFAULT_KAFKA_VERSION, KafkaBroker
from tests.conftest import REAL_KAFKA_ENV, assert_exactly_once, cli, unique_id, write_jsonl
from tests.support.scripted import DROP, Answer, FakeClock, ScriptedBroker

E = ErrorCode
COMMIT, ABORT = ControlType.COMMIT, ControlType.ABORT
TOPIC = "topic"

# -- a scripted broker that speaks KIP-939 ------------------------------------------


class TwoPhaseBroker(ScriptedBroker):
    """ScriptedBroker plus what the native path needs: InitProducerId v6 with enable2Pc,
    AddPartitionsToTxn, transactional Produce (checked like Kafka: partition added,
    sequences contiguous), DescribeTransactions; its log is what the controller reads.
    Unscripted EndTxn answers act like the real coordinator."""

    def __init__(
        self,
        *,
        offers_v6: bool = True,
        grants: Sequence[int] = (),
        end_txn: Sequence[Answer] = (),
        produce_errors: Sequence[int | None] = (),
        stored_timeout_ms: int = TWO_PHASE_TIMEOUT_MS,
        partitions: int = 3,
    ) -> None:
        super().__init__(end_txn=list(end_txn), init_producer_id=list(grants))
        self.versions.update(
            {
                ApiKey.INIT_PRODUCER_ID: 6 if offers_v6 else 5,
                ApiKey.END_TXN: 5,  # a TV2 broker: classic transactions must still get v4
                ApiKey.PRODUCE: 11,
                ApiKey.ADD_PARTITIONS_TO_TXN: 3,
                ApiKey.DESCRIBE_TRANSACTIONS: 0,
            }
        )
        for p in range(partitions):
            self.logs[(TOPIC, p)] = []
        self.ids: dict[str, tuple[int, int]] = {}  # transactional id -> (pid, epoch)
        self.two_pc: dict[str, bool] = {}
        self.state: dict[str, str] = {}
        self.added: dict[str, set[int]] = defaultdict(set)
        self.sequences: dict[tuple[str, int], int] = defaultdict(int)
        self.produce_errors = deque(produce_errors)
        self.stored_timeout_ms = stored_timeout_ms

    def offers_kip939(self) -> bool:
        return self.versions[ApiKey.INIT_PRODUCER_ID] >= 6

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
        self.calls.append(("init_producer_id", transactional_id, enable_2pc))
        if enable_2pc and not self.offers_kip939():
            raise UnsupportedError("the broker does not offer INIT_PRODUCER_ID (v6+)")
        code = self.init_script.popleft() if self.init_script else E.NONE
        if code != E.NONE:
            return InitProducerIdAnswer(code, -1, -1)
        if self.state.get(transactional_id) == "Ongoing":
            self._end(transactional_id, ABORT)  # a re-init aborts what the id left open
        pid, epoch = self.ids.get(transactional_id, (42, -1))
        self.ids[transactional_id] = (pid, epoch + 1)
        self.two_pc[transactional_id] = enable_2pc
        self.state[transactional_id] = "Empty"
        return InitProducerIdAnswer(E.NONE, pid, epoch + 1)

    def add_partitions_to_txn(
        self,
        node: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        topic: str,
        partitions: Sequence[int],
    ) -> dict[int, int]:
        self.calls.append(("add_partitions", transactional_id, tuple(partitions)))
        assert self.ids[transactional_id] == (producer_id, epoch)
        self.added[transactional_id].update(partitions)
        self.state[transactional_id] = "Ongoing"
        return dict.fromkeys(partitions, E.NONE)

    def produce_transactional(
        self,
        node: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        topic: str,
        records: Mapping[int, Sequence[Any]],
        *,
        kip890: bool,
        base_sequence: int | Mapping[int, int] = 0,
    ) -> dict[int, ProduceAnswer]:
        self.calls.append(("produce", transactional_id, {p: len(r) for p, r in records.items()}))
        assert not kip890, "the native writer writes classic (TV1) transactions"
        error = self.produce_errors.popleft() if self.produce_errors else None
        answers = {}
        for p, rows in records.items():
            sequence = base_sequence if isinstance(base_sequence, int) else base_sequence[p]
            if error is not None:
                answers[p] = ProduceAnswer(error, -1)
            elif p not in self.added[transactional_id]:
                answers[p] = ProduceAnswer(E.INVALID_TXN_STATE, -1)
            elif sequence != self.sequences[(transactional_id, p)]:
                answers[p] = ProduceAnswer(45, -1)  # OUT_OF_ORDER_SEQUENCE_NUMBER
            else:
                log = self.logs[(topic, p)]
                base = log[-1].last_offset + 1 if log else 0
                keys = tuple(row[0] for row in rows)
                log.append(
                    RecordBatch(
                        base, base + len(rows) - 1, producer_id, epoch, True, None, len(rows), keys
                    )
                )
                self.sequences[(transactional_id, p)] += len(rows)
                answers[p] = ProduceAnswer(E.NONE, base)
        return answers

    def end_txn(
        self,
        node: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        result: ControlType,
        version: int,
    ) -> int:
        self.calls.append(("end_txn", transactional_id, producer_id, epoch, result, version))
        answer = self.end_txn_script.popleft() if self.end_txn_script else Answer(E.NONE, result)
        if answer.marker is not None:
            self._end(transactional_id, answer.marker)
        if answer.code == DROP:
            raise ConnectionLostError("scripted: connection dropped")
        return int(answer.code)

    def describe_transaction(self, transactional_id: str) -> DescribedTransaction | None:
        if transactional_id not in self.ids:
            return None
        pid, epoch = self.ids[transactional_id]
        return DescribedTransaction(
            transactional_id=transactional_id,
            state=CoordinatorTxnState.parse(self.state[transactional_id]),
            producer_id=pid,
            producer_epoch=epoch,
            coordinator=1,
            transaction_timeout_ms=(
                self.stored_timeout_ms if self.two_pc[transactional_id] else 60_000
            ),
            transaction_start_time_ms=1_700_000_000_000,
        )

    def _end(self, transactional_id: str, marker: ControlType) -> None:
        if transactional_id not in self.ids:  # one of ScriptedBroker.prepare()'s
            self.write_marker(transactional_id, marker)
            return
        pid, epoch = self.ids[transactional_id]
        for p in sorted(self.added.pop(transactional_id, set())):
            log = self.logs[(TOPIC, p)]
            offset = log[-1].last_offset + 1 if log else 0
            log.append(RecordBatch(offset, offset, pid, epoch, True, marker, 1))
        self.state[transactional_id] = "CompleteCommit" if marker is COMMIT else "CompleteAbort"

    def kinds(self) -> list[str]:
        return [call[0] for call in self.calls]


def rows(n: int, prefix: str = "k") -> list[tuple[bytes | None, bytes]]:
    return [(f"{prefix}-{i}".encode(), b"value %d" % i) for i in range(n)]


def native_writer(broker: TwoPhaseBroker, tid: str = "tx-native", **options: Any) -> NativeWriter:
    clock = FakeClock()
    return NativeWriter(broker, tid, monotonic=clock, sleep=clock.sleep, **options)


def detect(broker: TwoPhaseBroker, requested: str) -> TwoPhaseMode:
    clock = FakeClock()
    return detect_two_phase(
        broker, requested, transactional_id="tx-native", clock=clock, sleep=clock.sleep
    )


def controller(broker: TwoPhaseBroker) -> TransactionController:
    clock = FakeClock()
    policy = RetryPolicy(deadline_s=30.0, marker_grace_s=2.0)
    return TransactionController(broker, policy, clock=clock, sleep=clock.sleep)


# -- partitioning ------------------------------------------------------------------


def test_murmur2_matches_kafkas_own_vectors_and_a_second_implementation():
    # org.apache.kafka.common.utils.UtilsTest#testMurmur2
    vectors = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    assert {k: murmur2(k) for k in vectors} == vectors
    rng = random.Random(939)
    for length in range(40):
        data = rng.randbytes(length)
        assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data) & 0xFFFFFFFF, data
    # toPositive(murmur2) % n: "21" is negative, so the sign bit must be masked, not abs()
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7


# -- detection -----------------------------------------------------------------------


def test_classic_asks_the_broker_nothing():
    broker = TwoPhaseBroker()
    assert detect(broker, "classic") is TwoPhaseMode.CLASSIC
    assert broker.calls == []


@pytest.mark.parametrize(
    ("offers_v6", "answer", "auto", "native_error"),
    [
        # a released broker: no InitProducerId v6 in ApiVersions, nothing is sent
        (False, None, TwoPhaseMode.CLASSIC, "up to v5"),
        (True, E.NONE, TwoPhaseMode.NATIVE, None),
        # v6 offered (unstable APIs) but transaction.two.phase.commit.enable=false, or no ACL
        (True, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TwoPhaseMode.CLASSIC, "TWO_PHASE_COMMIT"),
        (True, E.UNSUPPORTED_VERSION, TwoPhaseMode.CLASSIC, "UNSUPPORTED_VERSION"),
    ],
    ids=["v6-absent", "granted", "2pc-disabled", "unsupported"],
)
def test_detection(offers_v6, answer, auto, native_error):
    grants = [] if answer is None else [answer]
    broker = TwoPhaseBroker(offers_v6=offers_v6, grants=grants)
    assert detect(broker, "auto") is auto
    sent = [c for c in broker.calls if c[0] == "init_producer_id"]
    assert sent == ([] if answer is None else [("init_producer_id", "tx-native", True)])

    broker = TwoPhaseBroker(offers_v6=offers_v6, grants=grants)
    if native_error is None:
        assert detect(broker, "native") is TwoPhaseMode.NATIVE
        return
    with pytest.raises(ConfigurationError) as raised:
        detect(broker, "native")
    message = str(raised.value)
    for why in (
        native_error,
        "transaction.two.phase.commit.enable=true",
        "unstable.api.versions.enable=true",
        "librdkafka",
        "No released Apache Kafka offers it by default",
    ):
        assert why in message, message
    assert broker.count("add_partitions") == broker.count("produce") == 0


def test_detection_waits_for_a_loading_coordinator_and_an_abort_in_progress():
    broker = TwoPhaseBroker(
        grants=[E.COORDINATOR_LOAD_IN_PROGRESS, E.CONCURRENT_TRANSACTIONS, E.NONE]
    )
    assert detect(broker, "auto") is TwoPhaseMode.NATIVE
    assert broker.count("init_producer_id") == 3


@pytest.mark.parametrize("requested", ["auto", "native"])
def test_an_unknown_answer_is_fatal_not_a_fallback(requested):
    broker = TwoPhaseBroker(grants=[E.CLUSTER_AUTHORIZATION_FAILED])
    with pytest.raises(ProtocolError, match=r"CLUSTER_AUTHORIZATION_FAILED.*nothing was opened"):
        detect(broker, requested)


def test_an_unknown_request_is_refused():
    with pytest.raises(ConfigurationError, match=r"auto.*classic.*native"):
        detect(TwoPhaseBroker(), "2pc")


# -- the native writer at the seam ---------------------------------------------------


def test_native_path_prepares_a_2pc_committable_the_controller_commits():
    broker = TwoPhaseBroker()
    records = [*rows(40), (None, b"no key 1"), (None, b"no key 2"), (b"h", b"v", [("t", b"1")])]
    committable = native_writer(broker, batch_bytes=300).write(TOPIC, records)

    assert committable.kip939
    assert committable.transaction_timeout_ms == TWO_PHASE_TIMEOUT_MS
    assert committable.expires_at_ms is None  # no deadline for the timeout guard
    assert committable.transaction_version == TRANSACTION_VERSION_CLASSIC
    assert (committable.producer_id, committable.producer_epoch) == broker.ids["tx-native"]
    assert committable.start_time_ms == 1_700_000_000_000  # the coordinator's own
    assert committable.record_count == len(records)
    assert Committable.from_json(committable.to_json()) == committable
    # keys where Java puts them; several batches per partition, sequences contiguous
    for part in committable.partitions:
        batches = broker.logs[(TOPIC, part.partition)]
        keys = [k for b in batches for k in b.keys if k is not None]
        assert all(partition_for_key(k, 3) == part.partition for k in keys)
        assert sum(b.record_count for b in batches) == part.record_count
        assert (batches[0].base_offset, batches[-1].last_offset) == (
            part.first_offset,
            part.last_offset,
        )
    assert broker.count("produce") > 3
    assert broker.kinds().index("add_partitions") < broker.kinds().index("produce")
    assert [c[1:3] for c in broker.calls if c[0] == "init_producer_id"] == [("tx-native", True)]

    result = controller(broker).commit(committable)
    assert result.outcome is Outcome.COMMITTED
    [end] = [c for c in broker.calls if c[0] == "end_txn"]
    assert end[4:] == (COMMIT, 4), "a classic (TV1) 2PC transaction ends with EndTxn v4"
    totals = audit_topic(broker, TOPIC, [committable]).totals
    assert totals == {"committed": 43, "aborted": 0, "open": 0, "non_transactional": 0}


def test_classic_and_native_committables_differ_only_in_their_deadline():
    broker = TwoPhaseBroker(offers_v6=False)
    assert detect(broker, "auto") is TwoPhaseMode.CLASSIC
    classic = broker.prepare("tx-classic", records=5, partitions=2)
    assert classic.expires_at_ms == classic.deadline_ms == classic.start_time_ms + 60_000
    assert "kip939" not in classic.to_dict()  # old form, byte for byte
    assert controller(broker).commit(classic).outcome is Outcome.COMMITTED
    assert [c[5] for c in broker.calls if c[0] == "end_txn"] == [4]


def test_a_refused_grant_writes_nothing():
    broker = TwoPhaseBroker(grants=[E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED])
    with pytest.raises(ConfigurationError, match=r"transaction\.two\.phase\.commit\.enable"):
        native_writer(broker).write(TOPIC, rows(5))
    assert broker.kinds() == ["metadata", "find", "init_producer_id"]


def test_empty_input_opens_nothing():
    broker = TwoPhaseBroker()
    committable = native_writer(broker).write(TOPIC, [])
    assert committable.is_empty
    assert broker.count("init_producer_id") == 0


def test_unknown_topic_fails_before_anything_is_opened():
    broker = TwoPhaseBroker()
    with pytest.raises(ConfigurationError, match="create it first"):
        native_writer(broker).write("missing", rows(3))
    assert broker.count("init_producer_id") == 0


def test_a_failed_produce_aborts_the_transaction():
    broker = TwoPhaseBroker(produce_errors=[None, E.NOT_LEADER_OR_FOLLOWER])
    with pytest.raises(WriteError, match=r"transaction aborted.*NOT_LEADER_OR_FOLLOWER"):
        native_writer(broker, batch_bytes=200).write(TOPIC, rows(30))
    [end] = [c for c in broker.calls if c[0] == "end_txn"]
    assert end[4:] == (False, 4)
    totals = audit_topic(broker, TOPIC).totals
    assert totals["open"] == totals["committed"] == 0 and totals["aborted"] > 0


def test_a_bad_record_is_bad_input_and_aborts_what_was_written():
    broker = TwoPhaseBroker()
    records = [*rows(20), (b"k", "not bytes")]
    with pytest.raises(ConfigurationError, match=r"record 20: value must be bytes.*aborted"):
        native_writer(broker, batch_bytes=100).write(TOPIC, records)
    assert audit_topic(broker, TOPIC).totals["open"] == 0


def test_a_coordinator_that_did_not_keep_the_2pc_timeout_is_refused():
    broker = TwoPhaseBroker(stored_timeout_ms=60_000)
    with pytest.raises(WriteError, match=r"timeout 60000 ms.*2PC"):
        native_writer(broker).write(TOPIC, rows(5))
    assert broker.state["tx-native"] == "CompleteAbort"
    assert audit_topic(broker, TOPIC).totals["open"] == 0


def test_a_failed_abort_says_how_to_end_the_transaction():
    broker = TwoPhaseBroker(
        produce_errors=[E.NOT_LEADER_OR_FOLLOWER],
        end_txn=[Answer(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)],
    )
    with pytest.raises(WriteError, match="kafka2pc fence --transactional-id tx-native"):
        native_writer(broker).write(TOPIC, rows(5))


# -- the committable's optional flag ---------------------------------------------------


def test_old_committables_still_read_and_the_flag_is_validated():
    broker = TwoPhaseBroker()
    old = broker.prepare().to_dict()
    assert not Committable.from_dict(old).kip939
    with pytest.raises(CommittableError, match="'kip939' must be true or false"):
        Committable.from_dict({**old, "kip939": "yes"})
    with pytest.raises(CommittableError, match="'transaction_timeout_ms' must be 2147483647"):
        Committable.from_dict({**old, "kip939": True})
    flagged = {**old, "kip939": True, "transaction_timeout_ms": TWO_PHASE_TIMEOUT_MS}
    assert Committable.from_dict(flagged).expires_at_ms is None


# -- live: released brokers take the classic path --------------------------------------


@pytest.mark.kafka_versions()
def test_a_released_broker_takes_the_classic_path(protocol, bootstrap, topic, tmp_path):
    tid = unique_id("two-phase")
    assert detect_two_phase(protocol, "auto", transactional_id=tid) is TwoPhaseMode.CLASSIC
    with pytest.raises(ConfigurationError, match=r"unstable\.api\.versions\.enable=true"):
        detect_two_phase(protocol, "native", transactional_id=tid)

    source = write_jsonl(tmp_path / "rows.jsonl", 12)
    args = ("prepare", "-b", bootstrap, "-t", topic, "--transactional-id", tid)
    args += ("--input", str(source), "--key-field", "id")
    refused = cli(*args, "--two-phase", "native")
    assert refused.returncode == 2, refused.stderr
    message = json.loads(refused.stdout)["message"]
    assert "transaction.two.phase.commit.enable=true" in message
    assert "librdkafka" in message

    done = cli(*args, "--two-phase", "auto")
    assert done.returncode == 0, done.stderr
    committable = Committable.from_json(done.stdout)
    assert not committable.kip939 and committable.expires_at_ms is not None
    assert TransactionController(protocol).commit(committable).outcome is Outcome.COMMITTED
    assert_exactly_once(protocol, bootstrap, topic, committable, committed=12, aborted=0)


# -- live: a broker that grants native 2PC ---------------------------------------------

NATIVE_BROKER_CONFIG = {
    "transaction.two.phase.commit.enable": "true",
    "unstable.api.versions.enable": "true",
    "transaction.max.timeout.ms": "5000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


@pytest.mark.slow
def test_a_native_transaction_outlives_the_max_timeout_and_commits_elsewhere(tmp_path):
    """Prepared by `kafka2pc prepare --two-phase native` (a process that exits), still
    open 7 s later on a broker whose maximum transaction timeout is 5 s, while a classic
    one with a 3 s timeout is aborted; `kafka2pc commit` in another process commits it."""
    if os.environ.get(REAL_KAFKA_ENV):
        pytest.skip(f"needs a local broker of its own; {REAL_KAFKA_ENV} is set")
    broker = KafkaBroker(
        DEFAULT_KAFKA_VERSION, data_dir=tmp_path / "kafka", config=NATIVE_BROKER_CONFIG
    )
    with broker, KafkaProtocol({"bootstrap.servers": broker.bootstrap_servers}) as protocol:
        bootstrap = broker.bootstrap_servers
        topic = f"t-{uuid.uuid4().hex[:12]}"
        protocol.create_topic(topic, 3)
        native_id, classic_id = unique_id("native"), unique_id("classic")
        assert detect_two_phase(protocol, "auto", transactional_id=native_id) is (
            TwoPhaseMode.NATIVE
        )

        source = write_jsonl(tmp_path / "rows.jsonl", 30)
        base = ("prepare", "-b", bootstrap, "-t", topic, "--input", str(source))
        base += ("--key-field", "id")
        done = cli(*base, "--transactional-id", native_id, "--two-phase", "native")
        assert done.returncode == 0, done.stderr
        prepared_at = time.monotonic()
        native = Committable.from_json(done.stdout)
        done = cli(
            *base,
            "--transactional-id",
            classic_id,
            "--two-phase",
            "classic",
            "--transaction-timeout-ms",
            "3000",
        )
        assert done.returncode == 0, done.stderr
        classic = Committable.from_json(done.stdout)
        assert native.kip939 and native.transaction_timeout_ms == TWO_PHASE_TIMEOUT_MS
        assert not classic.kip939
        # The same keys: our murmur2 and librdkafka's murmur2_random agree on partitions.
        assert [(p.partition, p.record_count) for p in native.partitions] == [
            (p.partition, p.record_count) for p in classic.partitions
        ]

        deadline = time.monotonic() + 30
        while getattr(protocol.describe_transaction(classic_id), "state", None) != "CompleteAbort":
            assert time.monotonic() < deadline, protocol.describe_transaction(classic_id)
            time.sleep(0.2)
        time.sleep(max(0.0, 7.0 - (time.monotonic() - prepared_at)))
        state = protocol.describe_transaction(native_id)
        assert state is not None
        assert (state.state, state.producer_id, state.producer_epoch) == (
            "Ongoing",
            native.producer_id,
            native.producer_epoch,
        )
        assert state.transaction_timeout_ms == TWO_PHASE_TIMEOUT_MS
        assert marker_views(LogReader(protocol), [native])[0].open

        committed = cli("commit", "-b", bootstrap, "-", stdin=native.to_json())
        assert committed.returncode == 0, committed.stderr
        assert json.loads(committed.stdout)["outcome"] == "COMMITTED"
        lost = cli("commit", "-b", bootstrap, "-", stdin=classic.to_json())
        assert lost.returncode == 1
        assert json.loads(lost.stdout)["outcome"] == "LOST"
        assert_exactly_once(protocol, bootstrap, topic, native, classic, committed=30, aborted=30)
