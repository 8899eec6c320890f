"""Kafka's own EndTxn answers, which the embedded broker cannot produce, against a scripted broker.

Rows follow the TV1/TV2 table in KAFKA_NOTES.md section 2. The rule under test:
"fenced" and "invalid state" never count as committed; the log's markers decide.
"""

from __future__ import annotations

import pytest

from airflow_provider_kafka2pc.errors import (
    ConnectionLostError,
    ProtocolError,
    TransactionInDoubtError,
)
from airflow_provider_kafka2pc.protocol.codes import ErrorCode
from airflow_provider_kafka2pc.protocol.records import ControlType
from airflow_provider_kafka2pc.transaction.audit import audit_topic
from airflow_provider_kafka2pc.transaction.committable import TRANSACTION_VERSION_KIP890
from airflow_provider_kafka2pc.transaction.controller import (
    END_TXN_ACTIONS,
    EndTxnAction,
    Outcome,
    RetryPolicy,
    TransactionController,
    classify_end_txn,
)
from tests.support.scripted import COORDINATOR, DROP, Answer, FakeClock, ScriptedBroker

COMMIT, ABORT = ControlType.COMMIT, ControlType.ABORT
E = ErrorCode


def controller(
    broker: ScriptedBroker, deadline_s: float = 30.0
) -> tuple[TransactionController, FakeClock]:
    clock = FakeClock()
    policy = RetryPolicy(deadline_s=deadline_s, marker_grace_s=2.0)
    return TransactionController(broker, policy, clock=clock, sleep=clock.sleep), clock


@pytest.mark.parametrize(
    ("row", "answers", "expected"),
    [
        ("commit accepted, markers written", [Answer(E.NONE, COMMIT)], Outcome.COMMITTED),
        (
            "TV2 retry of a commit that succeeded (epoch mismatch)",
            [Answer(E.INVALID_TXN_STATE, COMMIT)],
            Outcome.ALREADY_COMMITTED,
        ),
        ("TV1 aborted by timeout, epoch bumped", [Answer(E.PRODUCER_FENCED, ABORT)], Outcome.LOST),
        ("TV2 aborted by timeout", [Answer(E.INVALID_TXN_STATE, ABORT)], Outcome.LOST),
        (
            "fenced by a newer InitProducerId, abort markers not yet visible",
            [Answer(E.PRODUCER_FENCED)],
            Outcome.LOST,
        ),
        (
            "TV2 fencing: transiently INVALID_TXN_STATE, then PRODUCER_FENCED",
            [Answer(E.INVALID_TXN_STATE), Answer(E.PRODUCER_FENCED, ABORT)],
            Outcome.LOST,
        ),
        ("old-style fencing answer", [Answer(E.INVALID_PRODUCER_EPOCH)], Outcome.LOST),
        (
            "id expired after its transaction was aborted",
            [Answer(E.INVALID_PRODUCER_ID_MAPPING, ABORT)],
            Outcome.LOST,
        ),
        (
            "commit of a transaction already aborted",
            [Answer(E.INVALID_TXN_STATE, ABORT)],
            Outcome.LOST,
        ),
        ("success answer but the log holds an abort marker", [Answer(E.NONE, ABORT)], Outcome.LOST),
        (
            "coordinator loading",
            [Answer(E.COORDINATOR_LOAD_IN_PROGRESS), Answer(E.NONE, COMMIT)],
            Outcome.COMMITTED,
        ),
        (
            "coordinator moved",
            [Answer(E.NOT_COORDINATOR), Answer(E.NONE, COMMIT)],
            Outcome.COMMITTED,
        ),
        (
            "coordinator not available",
            [Answer(E.COORDINATOR_NOT_AVAILABLE), Answer(E.NONE, COMMIT)],
            Outcome.COMMITTED,
        ),
        (
            "concurrent transactions",
            [Answer(E.CONCURRENT_TRANSACTIONS)] * 3 + [Answer(E.NONE, COMMIT)],
            Outcome.COMMITTED,
        ),
        (
            "dropped connection, then success",
            [Answer(DROP), Answer(E.NONE, COMMIT)],
            Outcome.COMMITTED,
        ),
        (
            "dropped connection, but the commit went through",
            [Answer(DROP, COMMIT)],
            Outcome.ALREADY_COMMITTED,
        ),
    ],
)
def test_commit_answers(row, answers, expected):
    broker = ScriptedBroker(end_txn=answers)
    committable = broker.prepare()
    ctl, clock = controller(broker)
    result = ctl.commit(committable)
    assert result.outcome is expected, row
    assert not broker.end_txn_script, "every scripted answer was consumed"
    assert all(s <= RetryPolicy().max_backoff_s for s in clock.sleeps)


def test_refind_coordinator_after_it_moved():
    broker = ScriptedBroker(end_txn=[Answer(E.NOT_COORDINATOR), Answer(E.NONE, COMMIT)])
    ctl, _ = controller(broker)
    ctl.commit(broker.prepare())
    assert broker.count("find") == 2


def test_concurrent_transactions_keeps_the_coordinator():
    broker = ScriptedBroker(end_txn=[Answer(E.CONCURRENT_TRANSACTIONS), Answer(E.NONE, COMMIT)])
    ctl, _ = controller(broker)
    ctl.commit(broker.prepare())
    assert broker.count("find") == 1


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        ([Answer(E.NONE, ABORT)], Outcome.ABORTED),
        ([Answer(E.PRODUCER_FENCED)], Outcome.ALREADY_ABORTED),
        ([Answer(E.INVALID_TXN_STATE, ABORT)], Outcome.ALREADY_ABORTED),
        ([Answer(E.NONE, COMMIT)], Outcome.ALREADY_COMMITTED),  # the commit won the race
    ],
)
def test_abort_answers(answers, expected):
    broker = ScriptedBroker(end_txn=answers)
    ctl, _ = controller(broker)
    assert ctl.abort(broker.prepare()).outcome is expected


@pytest.mark.parametrize(
    ("commit", "answer", "expected"),
    [
        (True, E.NONE, Outcome.ALREADY_COMMITTED),  # TV1 retry: NONE, no new marker
        (True, E.INVALID_TXN_STATE, Outcome.ALREADY_COMMITTED),  # TV2 retry
        (False, E.NONE, Outcome.ALREADY_COMMITTED),  # a broker that answers NONE, does nothing
        (False, E.INVALID_TXN_STATE, Outcome.ALREADY_COMMITTED),  # Kafka: abort after commit
    ],
)
def test_ending_a_finished_transaction_reports_already(commit, answer, expected):
    broker = ScriptedBroker(end_txn=[Answer(answer)])
    committable = broker.prepare()
    broker.write_marker("tx-1", COMMIT)
    ctl, _ = controller(broker)
    result = ctl.commit(committable) if commit else ctl.abort(committable)
    assert result.outcome is expected
    assert broker.count("end_txn") == 1


def test_unknown_id_with_unended_records_is_in_doubt_not_lost():
    """The coordinator forgets an id only after its transaction ended; records without a
    marker then belong to someone else: LOST would have them written again."""
    broker = ScriptedBroker(end_txn=[Answer(E.INVALID_PRODUCER_ID_MAPPING)])
    ctl, _ = controller(broker)
    with pytest.raises(TransactionInDoubtError, match="INVALID_PRODUCER_ID_MAPPING"):
        ctl.commit(broker.prepare())
    assert broker.count("end_txn") == 1


def test_success_without_any_marker_is_in_doubt_not_committed():
    broker = ScriptedBroker(end_txn=[Answer(E.NONE)])
    ctl, clock = controller(broker, deadline_s=10)
    with pytest.raises(TransactionInDoubtError, match="may still be open"):
        ctl.commit(broker.prepare())
    assert clock.now - 1000.0 >= 10


def test_invalid_state_without_markers_retries_until_the_deadline():
    broker = ScriptedBroker(end_txn=[Answer(E.INVALID_TXN_STATE)] * 20)
    ctl, _ = controller(broker, deadline_s=5)
    with pytest.raises(TransactionInDoubtError):
        ctl.commit(broker.prepare())
    assert 1 < broker.count("end_txn") < 20


@pytest.mark.parametrize(
    "code", [E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 35, 87, E.UNKNOWN_SERVER_ERROR]
)
def test_known_and_unknown_failures_are_fatal(code):
    broker = ScriptedBroker(end_txn=[Answer(code)])
    ctl, _ = controller(broker)
    with pytest.raises(ProtocolError) as raised:
        ctl.commit(broker.prepare())
    assert raised.value.error_name


def test_classic_transactions_end_with_end_txn_v4_even_on_a_tv2_broker():
    broker = ScriptedBroker(end_txn=[Answer(E.NONE, COMMIT)], end_txn_max_version=5)
    ctl, _ = controller(broker)
    ctl.commit(broker.prepare())
    assert [c[5] for c in broker.calls if c[0] == "end_txn"] == [4]


def test_kip890_transactions_end_with_end_txn_v5():
    broker = ScriptedBroker(end_txn=[Answer(E.NONE, COMMIT)], end_txn_max_version=5)
    ctl, _ = controller(broker)
    ctl.commit(broker.prepare(transaction_version=TRANSACTION_VERSION_KIP890))
    assert [c[5] for c in broker.calls if c[0] == "end_txn"] == [5]


def test_kip890_transaction_on_an_old_broker_is_refused():
    broker = ScriptedBroker(end_txn=[], end_txn_max_version=4)
    ctl, _ = controller(broker)
    with pytest.raises(ProtocolError, match="KIP-890"):
        ctl.commit(broker.prepare(transaction_version=TRANSACTION_VERSION_KIP890))


def test_endtxn_carries_the_stored_producer_id_and_epoch():
    broker = ScriptedBroker(end_txn=[Answer(E.NONE, COMMIT)])
    ctl, _ = controller(broker)
    ctl.commit(broker.prepare(producer_id=9001, epoch=17))
    assert [c[1:5] for c in broker.calls if c[0] == "end_txn"] == [("tx-1", 9001, 17, COMMIT)]


def test_fence_retries_while_the_coordinator_aborts():
    broker = ScriptedBroker(
        init_producer_id=[E.CONCURRENT_TRANSACTIONS, E.NOT_COORDINATOR, E.NONE],
        end_txn=[Answer(E.PRODUCER_FENCED)],
    )
    committable = broker.prepare()
    ctl, _ = controller(broker)
    result = ctl.fence("tx-1")
    assert result.producer_epoch == 4
    assert broker.count("init_producer_id") == 3
    assert ctl.commit(committable).outcome is Outcome.LOST


def test_fence_refuses_fatal_answers():
    broker = ScriptedBroker(init_producer_id=[E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED])
    ctl, _ = controller(broker)
    with pytest.raises(ProtocolError, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED"):
        ctl.fence("tx-1")


def test_fenced_and_invalid_state_never_read_as_committed():
    for code in (
        E.PRODUCER_FENCED,
        E.INVALID_TXN_STATE,
        E.INVALID_PRODUCER_EPOCH,
        E.INVALID_PRODUCER_ID_MAPPING,
    ):
        assert classify_end_txn(code) is EndTxnAction.RESOLVE_FROM_LOG
    assert classify_end_txn(12345) is EndTxnAction.FATAL
    assert {a for a in END_TXN_ACTIONS.values()} <= set(EndTxnAction)


def test_an_empty_answer_below_the_high_watermark_is_not_the_end():
    broker = ScriptedBroker()
    committable = broker.prepare(records=10, partitions=2)
    broker.write_marker("tx-1", COMMIT)
    broker.empty_answers = 3
    report = audit_topic(broker, "topic", [committable])
    assert report.totals == {"committed": 20, "aborted": 0, "open": 0, "non_transactional": 0}
    assert broker.empty_answers == 0


def test_endless_empty_answers_below_the_high_watermark_fail_loudly():
    broker = ScriptedBroker()
    broker.prepare()
    broker.empty_answers = 1000
    with pytest.raises(ProtocolError, match="empty answers below the high watermark"):
        audit_topic(broker, "topic")


def test_commit_all_reads_only_what_was_appended():
    broker = ScriptedBroker(end_txn=[Answer(E.NONE, COMMIT)] * 3)
    committables = [broker.prepare(f"tx-{i}", producer_id=100 + i) for i in range(3)]
    ctl, _ = controller(broker)
    results = ctl.commit_all(committables)
    assert [r.outcome for r in results] == [Outcome.COMMITTED] * 3
    assert [r.transactional_id for r in results] == ["tx-0", "tx-1", "tx-2"]
    fetches = [c for c in broker.calls if c[0] == "fetch"]
    # 2 partitions x (note the end + verify from there), not 3 committables x 2 x 2 ...
    assert len(fetches) == 4
    # ... and the verification starts at the end noted before EndTxn (30 data records).
    assert sorted(c[3] for c in fetches[2:]) == [30, 30]


def test_a_moved_partition_leader_is_looked_up_again():
    broker = ScriptedBroker(end_txn=[Answer(E.NONE, COMMIT)])
    committable = broker.prepare()
    broker.not_leader_answers = 2
    ctl, _ = controller(broker)
    assert ctl.commit(committable).outcome is Outcome.COMMITTED
    assert broker.count("metadata") == 3  # the first lookup, then one per moved answer


class BatchFinding(ScriptedBroker):
    """A broker that finds many coordinators in one request (FindCoordinator v4+)."""

    def __init__(self, *args, found: dict[str, int] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.found = found  # id -> error code; None: every id found

    def find_transaction_coordinators(self, ids):
        self.calls.append(("find_many", list(ids)))
        codes = self.found if self.found is not None else dict.fromkeys(ids, E.NONE)
        return {tid: (codes[tid], COORDINATOR) for tid in ids if tid in codes}


def test_commit_all_finds_every_coordinator_in_one_request():
    broker = BatchFinding(end_txn=[Answer(E.NONE, COMMIT)] * 3)
    committables = [broker.prepare(f"tx-{i}", producer_id=100 + i) for i in range(3)]
    ctl, _ = controller(broker)
    assert [r.outcome for r in ctl.commit_all(committables)] == [Outcome.COMMITTED] * 3
    assert broker.count("find_many") == 1 and broker.count("find") == 0


def test_an_id_the_batch_lookup_missed_is_found_on_its_own():
    found = {"tx-0": E.NONE, "tx-1": E.COORDINATOR_NOT_AVAILABLE}  # tx-2: not answered
    broker = BatchFinding(end_txn=[Answer(E.NONE, COMMIT)] * 3, found=found)
    committables = [broker.prepare(f"tx-{i}", producer_id=100 + i) for i in range(3)]
    ctl, _ = controller(broker)
    assert [r.outcome for r in ctl.commit_all(committables)] == [Outcome.COMMITTED] * 3
    assert [c[1] for c in broker.calls if c[0] == "find"] == ["tx-1", "tx-2"]


class BatchEnding(BatchFinding):
    """A broker connection that sends many EndTxns at once, answered from the same script."""

    def end_txns(self, batches):
        answers = {}
        for node, calls in batches.items():
            self.calls.append(("end_many", [call.transactional_id for call in calls]))
            answers[node] = []
            for call in calls:
                try:
                    answers[node].append(self.end_txn(node, *call))
                except ConnectionLostError as exc:
                    answers[node].append(exc)
        return answers


def test_the_first_endtxns_go_out_together_and_a_retry_alone():
    # tx-1 is answered CONCURRENT_TRANSACTIONS first: retried on its own, then accepted.
    script = [Answer(E.NONE, COMMIT), Answer(E.CONCURRENT_TRANSACTIONS)]
    script += [Answer(E.NONE, COMMIT), Answer(E.NONE, COMMIT)]
    broker = BatchEnding(end_txn=script)
    committables = [broker.prepare(f"tx-{i}", producer_id=100 + i) for i in range(3)]
    ctl, _ = controller(broker)
    results = ctl.commit_all(committables)
    assert [r.outcome for r in results] == [Outcome.COMMITTED] * 3
    assert [r.attempts for r in results] == [1, 2, 1]
    assert broker.count("end_many") == 1
    alone = [c[1] for c in broker.calls if c[0] == "end_txn"]
    assert alone == ["tx-0", "tx-1", "tx-2", "tx-1"]  # three sent together, one retry


def test_an_endtxn_lost_in_a_batch_is_resolved_from_the_log_or_sent_again():
    # tx-0's answer is lost after its markers were written; tx-1's is lost before.
    script = [Answer(DROP, COMMIT), Answer(DROP), Answer(E.NONE, COMMIT)]
    broker = BatchEnding(end_txn=script)
    committables = [broker.prepare(f"tx-{i}", producer_id=100 + i) for i in range(2)]
    ctl, _ = controller(broker)
    results = ctl.commit_all(committables)
    assert [r.outcome for r in results] == [Outcome.ALREADY_COMMITTED, Outcome.COMMITTED]
    assert [c[1] for c in broker.calls if c[0] == "end_txn"] == ["tx-0", "tx-1", "tx-1"]
