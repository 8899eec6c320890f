"""The decision rule (``assess``) as a table, against the README and the module's docstring:
COMMIT only when every leased id came back as a prepared participant, their records add up
to the source's rows, every transaction is still open on the broker, and the commit has at
least the commit margin before the earliest transaction timeout ("the decision refuses
COMMIT when the earliest participant would expire within the commit margin, naming it").
Anything else is ABORT, with a reason a person can act on.

The broker is a script at ``not_open``'s seam (:mod:`tests.support.scripted`):
DescribeTransactions where the broker has it, else the log's markers.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_provider_kafka2pc.coordination.decision import assess, earliest_deadline_ms
from airflow_provider_kafka2pc.ledger import BatchState, Verdict
from airflow_provider_kafka2pc.ledger import ParticipantState as P
from airflow_provider_kafka2pc.protocol.described import CoordinatorTxnState as Coord
from airflow_provider_kafka2pc.protocol.records import ControlType
from tests.support.scripted import ScriptedBroker
from tests.unit.builders import (
    EPOCH,
    NOW,
    NOW_MS,
    PID,
    RECORDS,
    TIMEOUT_MS,
    batch,
    ms,
    participant,
    participants,
    tid,
)

S = BatchState
COMMIT, ABORT = Verdict.COMMIT, Verdict.ABORT
#: The decision operator's default commit margin.
MARGIN = timedelta(seconds=60)
TIMEOUT = timedelta(milliseconds=TIMEOUT_MS)


def left(delta: timedelta):
    """When a transaction opened that has ``delta`` left before its timeout at NOW."""
    return NOW - TIMEOUT + delta


PREPARED3 = (P.PREPARED, P.PREPARED, P.PREPARED)
#: Three prepared participants, 10 records each, 2 min before their timeout.
ROOMY = participants(*PREPARED3, started=left(timedelta(minutes=2)))
#: A day-old KIP-939 2PC transaction each: no timeout at all.
KIP939 = participants(*PREPARED3, started=NOW - timedelta(days=1), kip939=True)
OPEN: dict = {}  # the coordinator says every transaction is Ongoing, as prepared


def _row(b, parts, says, verdict, why, id):
    return pytest.param(b, parts, says, verdict, why, id=id)


ASSESS_RULES = [
    # -- the ledger: the prepare completed, for exactly the leased ids ----------------------
    _row(
        batch(S.PREPARING),
        ROOMY,
        OPEN,
        ABORT,
        "the prepare did not complete (batch is PREPARING)",
        id="batch PREPARING -> ABORT: the prepare did not complete",
    ),
    _row(
        batch(),
        ROOMY[:2],
        OPEN,
        ABORT,
        "participants ['exp-0', 'exp-1'] do not match the leased ids ['exp-0', 'exp-1', 'exp-2']",
        id="a leased id has no participant -> ABORT naming both lists",
    ),
    _row(
        batch(),
        [ROOMY[1], ROOMY[0], ROOMY[2]],
        OPEN,
        ABORT,
        "do not match the leased ids",
        id="participants out of partition order -> ABORT",
    ),
    _row(
        batch(ids=(tid(0), tid(1), "exp-7")),
        ROOMY,
        OPEN,
        ABORT,
        "participants ['exp-0', 'exp-1', 'exp-2'] do not match the leased ids "
        "['exp-0', 'exp-1', 'exp-7']",
        id="a participant under an id not leased -> ABORT",
    ),
    _row(
        batch(),
        participants(P.PREPARED, P.LOST, P.PREPARED, started=left(timedelta(minutes=2))),
        OPEN,
        ABORT,
        "participants not prepared: exp-1 LOST",
        id="one participant LOST -> ABORT naming it",
    ),
    _row(
        batch(),
        participants(P.COMMITTED, P.PREPARED, P.ABORTED, started=left(timedelta(minutes=2))),
        OPEN,
        ABORT,
        "participants not prepared: exp-0 COMMITTED, exp-2 ABORTED",
        id="participants already COMMITTED and ABORTED -> ABORT naming both",
    ),
    # -- the counts: records add up to the source's rows -----------------------------------
    _row(
        batch(source_rows=3 * RECORDS + 1),
        ROOMY,
        OPEN,
        ABORT,
        "participants hold 30 records but the source had 31 rows",
        id="fewer records than source rows -> ABORT",
    ),
    _row(
        batch(source_rows=3 * RECORDS - 1),
        ROOMY,
        OPEN,
        ABORT,
        "participants hold 30 records but the source had 29 rows",
        id="more records than source rows -> ABORT",
    ),
    _row(
        batch(source_rows=None),
        ROOMY,
        OPEN,
        ABORT,
        "participants hold 30 records but the source had None rows",
        id="source row count not recorded -> ABORT",
    ),
    _row(
        batch(source_rows=0),
        participants(*PREPARED3, records=0, started=NOW - timedelta(days=1)),
        OPEN,
        COMMIT,
        "the source was empty: nothing to commit",
        id="empty source, every committable empty -> COMMIT without the broker or the guard",
    ),
    _row(
        batch(source_rows=5),
        participants(*PREPARED3, records=0),
        OPEN,
        ABORT,
        "participants hold 0 records but the source had 5 rows",
        id="every committable empty but the source had rows -> ABORT",
    ),
    _row(
        batch(source_rows=0),
        participants(P.PREPARED, P.LOST, P.PREPARED, records=0),
        OPEN,
        ABORT,
        "participants not prepared: exp-1 LOST",
        id="empty source, a participant LOST -> ABORT (states are checked first)",
    ),
    # -- the timeout guard: the commit margin before the earliest timeout ------------------
    _row(
        batch(),
        ROOMY,
        OPEN,
        COMMIT,
        "3 participants prepared 30 records, all open, 120.0 s before the earliest "
        "transaction timeout",
        id="all prepared, counts match, 2 min left, all open -> COMMIT",
    ),
    _row(
        batch(),
        participants(*PREPARED3, started=left(MARGIN + timedelta(seconds=1))),
        OPEN,
        COMMIT,
        "61.0 s before the earliest transaction timeout",
        id="1 s more than the commit margin left -> COMMIT",
    ),
    _row(
        batch(),
        participants(*PREPARED3, started=left(MARGIN)),
        OPEN,
        ABORT,
        "60.0 s left before the earliest transaction timeout (partition 0, exp-0), less than "
        "the commit margin of 60.0 s: the commit could not finish in time",
        id="exactly the commit margin left -> ABORT naming the partition",
    ),
    _row(
        batch(),
        participants(*PREPARED3, started=left(timedelta(seconds=-5))),
        OPEN,
        ABORT,
        "the earliest transaction timed out 5.0 s ago (partition 0, exp-0)",
        id="the earliest timeout passed -> ABORT saying how long ago",
    ),
    _row(
        batch(),
        [*ROOMY[:2], participant(2, started=left(timedelta(seconds=30)))],
        OPEN,
        ABORT,
        "30.0 s left before the earliest transaction timeout (partition 2, exp-2)",
        id="only partition 2 inside the margin -> ABORT naming partition 2",
    ),
    _row(
        batch(source_rows=2 * RECORDS),
        [ROOMY[0], participant(1, records=0, started=NOW - timedelta(days=1)), ROOMY[2]],
        OPEN,
        COMMIT,
        "3 participants prepared 20 records, all open, 120.0 s before",
        id="an empty committable opened no transaction -> not guarded, COMMIT",
    ),
    _row(
        batch(),
        KIP939,
        OPEN,
        COMMIT,
        "3 participants prepared 30 records, all open, none of them can time out (2PC)",
        id="KIP-939 participants a day old -> COMMIT, no margin to keep",
    ),
    _row(
        batch(),
        [*KIP939[:2], participant(2, started=left(timedelta(seconds=30)))],
        OPEN,
        ABORT,
        "30.0 s left before the earliest transaction timeout (partition 2, exp-2)",
        id="KIP-939 and one classic participant inside the margin -> ABORT by the classic one",
    ),
    _row(
        batch(),
        participants(*PREPARED3, started=left(timedelta(seconds=-5))),
        {"states": {tid(1): Coord.COMPLETE_ABORT}},
        ABORT,
        "the earliest transaction timed out 5.0 s ago",
        id="timed out and closed on the broker -> ABORT by the guard (asked before the broker)",
    ),
    # -- the broker: every transaction still open, as prepared ------------------------------
    _row(
        batch(),
        ROOMY,
        {"states": {tid(1): Coord.COMPLETE_ABORT}},
        ABORT,
        "no longer open: exp-1 (coordinator state CompleteAbort)",
        id="coordinator says CompleteAbort -> ABORT naming the id",
    ),
    _row(
        batch(),
        ROOMY,
        {"states": {tid(0): Coord.PREPARE_COMMIT}},
        ABORT,
        "no longer open: exp-0 (coordinator state PrepareCommit)",
        id="coordinator says PrepareCommit -> ABORT (only Ongoing counts as open)",
    ),
    _row(
        batch(),
        ROOMY,
        {"states": {tid(2): Coord.EMPTY}},
        ABORT,
        "exp-2 (coordinator state Empty)",
        id="coordinator says Empty -> ABORT",
    ),
    _row(
        batch(),
        ROOMY,
        {"identities": {tid(1): (PID, EPOCH + 1)}},
        ABORT,
        "no longer open: exp-1 (now pid 42 epoch 4, prepared as pid 42 epoch 3)",
        id="coordinator says Ongoing under another epoch -> ABORT (fenced and reopened)",
    ),
    _row(
        batch(),
        ROOMY,
        {"identities": {tid(1): (77, 0)}},
        ABORT,
        "exp-1 (now pid 77 epoch 0, prepared as pid 42 epoch 3)",
        id="coordinator says Ongoing under another producer id -> ABORT",
    ),
    _row(
        batch(),
        ROOMY,
        {"forgotten": {tid(2)}},
        ABORT,
        "no longer open: exp-2 (unknown to the coordinator)",
        id="coordinator does not know the id -> ABORT",
    ),
    _row(
        batch(),
        ROOMY,
        {"states": {tid(0): Coord.COMPLETE_COMMIT}, "forgotten": {tid(2)}},
        ABORT,
        "no longer open: exp-0 (coordinator state CompleteCommit); exp-2 (unknown to the "
        "coordinator)",
        id="two closed -> ABORT naming both",
    ),
    _row(
        batch(),
        KIP939,
        {"identities": {tid(0): (PID, EPOCH + 1)}},
        ABORT,
        "exp-0 (now pid 42 epoch 4, prepared as pid 42 epoch 3)",
        id="KIP-939 participant under another epoch -> ABORT",
    ),
    _row(
        batch(),
        ROOMY,
        {"describe_fails": True},
        COMMIT,
        "all open",
        id="DescribeTransactions fails, no markers in the log -> COMMIT",
    ),
    _row(
        batch(),
        ROOMY,
        {"describe_fails": True, "markers": {tid(1): ControlType.ABORT}},
        ABORT,
        "no longer open: exp-1 (aborted)",
        id="DescribeTransactions fails, an abort marker -> ABORT",
    ),
    _row(
        batch(),
        ROOMY,
        {"can_describe": False},
        COMMIT,
        "3 participants prepared 30 records, all open",
        id="no DescribeTransactions (Kafka < 3.0), no markers -> COMMIT",
    ),
    _row(
        batch(),
        ROOMY,
        {"can_describe": False, "markers": {tid(0): ControlType.COMMIT}},
        ABORT,
        "no longer open: exp-0 (committed)",
        id="no DescribeTransactions, a commit marker -> ABORT",
    ),
    _row(
        batch(),
        ROOMY,
        {"can_describe": False, "markers": {tid(2): ControlType.ABORT}},
        ABORT,
        "no longer open: exp-2 (aborted)",
        id="no DescribeTransactions, an abort marker -> ABORT",
    ),
]


@pytest.mark.parametrize(("b", "parts", "says", "verdict", "why"), ASSESS_RULES)
def test_the_decision_commits_only_a_complete_counted_open_batch_inside_the_margin(
    b, parts, says, verdict, why
):
    broker = ScriptedBroker.holding([p.committable for p in parts], **says)

    result = assess(b, parts, broker, now_ms=NOW_MS, commit_margin_ms=ms(MARGIN))

    assert result.verdict is verdict, result.reason
    assert why in result.reason


@pytest.mark.parametrize(
    "state",
    [s for s in BatchState if s is not BatchState.PREPARED],
    ids=lambda s: f"{s.value} -> ABORT",
)
def test_every_batch_state_but_prepared_aborts(state):
    # The decision operator assesses only a batch without a verdict (PREPARING or
    # PREPARED); for the others the ledger keeps the recorded verdict.
    result = assess(
        batch(state), ROOMY, ScriptedBroker.holding(), now_ms=NOW_MS, commit_margin_ms=ms(MARGIN)
    )

    assert result.verdict is ABORT
    assert result.reason == f"the prepare did not complete (batch is {state.value})"


def test_the_broker_is_asked_only_about_transactions_that_were_opened():
    parts = [ROOMY[0], participant(1, records=0), ROOMY[2]]
    broker = ScriptedBroker.holding([p.committable for p in parts])

    result = assess(
        batch(source_rows=2 * RECORDS), parts, broker, now_ms=NOW_MS, commit_margin_ms=ms(MARGIN)
    )

    assert result.verdict is COMMIT
    assert broker.described == [[tid(0), tid(2)]]


def test_an_empty_source_commits_without_asking_the_broker():
    parts = participants(*PREPARED3, records=0)
    broker = ScriptedBroker.holding()

    result = assess(batch(source_rows=0), parts, broker, now_ms=NOW_MS, commit_margin_ms=ms(MARGIN))

    assert result.verdict is COMMIT
    assert (result.earliest_deadline_ms, result.seconds_left) == (None, None)
    assert broker.described == [] and broker.fetched == []


def test_without_describe_transactions_the_decision_reads_the_log_after_each_last_record():
    broker = ScriptedBroker.holding([p.committable for p in ROOMY], can_describe=False)

    assess(batch(), ROOMY, broker, now_ms=NOW_MS, commit_margin_ms=ms(MARGIN))

    assert broker.described == []
    assert sorted(broker.fetched) == [("orders", 0, 109), ("orders", 1, 109), ("orders", 2, 109)]


@pytest.mark.parametrize(
    ("parts", "deadline", "seconds_left"),
    [
        pytest.param(ROOMY, NOW_MS + 120_000, 120.0, id="classic: the earliest deadline, 120 s"),
        pytest.param(
            [*ROOMY[:2], participant(2, started=left(timedelta(seconds=90)))],
            NOW_MS + 90_000,
            90.0,
            id="classic: the earliest of three, 90 s",
        ),
        pytest.param(
            participants(*PREPARED3, started=left(timedelta(seconds=-5))),
            NOW_MS - 5_000,
            -5.0,
            id="classic, timed out: negative seconds left",
        ),
        pytest.param(KIP939, None, None, id="KIP-939 only: no deadline"),
        pytest.param(
            [*KIP939[:2], participant(2, started=left(timedelta(seconds=90)))],
            NOW_MS + 90_000,
            90.0,
            id="KIP-939 and classic: the classic one's deadline",
        ),
    ],
)
def test_the_assessment_carries_the_earliest_deadline_and_the_seconds_left(
    parts, deadline, seconds_left
):
    broker = ScriptedBroker.holding([p.committable for p in parts])

    result = assess(batch(), parts, broker, now_ms=NOW_MS, commit_margin_ms=ms(MARGIN))

    assert result.earliest_deadline_ms == deadline == earliest_deadline_ms(parts)
    assert result.seconds_left == seconds_left


@pytest.mark.parametrize(
    ("parts", "deadline"),
    [
        pytest.param([], None, id="no participants: None"),
        pytest.param(participants(*PREPARED3, records=0), None, id="only empty committables: None"),
        pytest.param(KIP939, None, id="only KIP-939 transactions: None"),
        pytest.param(
            [participant(0, started=NOW), participant(1, started=NOW - timedelta(minutes=1))],
            NOW_MS + TIMEOUT_MS - 60_000,
            id="classic ones: the earliest start plus timeout",
        ),
        pytest.param(
            [
                participant(0, started=NOW),
                participant(1, records=0, started=NOW - timedelta(days=1)),
            ],
            NOW_MS + TIMEOUT_MS,
            id="an empty committable does not count",
        ),
    ],
)
def test_the_earliest_deadline_counts_only_opened_classic_transactions(parts, deadline):
    assert earliest_deadline_ms(parts) == deadline


def test_an_abort_before_the_guard_carries_no_deadline():
    result = assess(
        batch(S.PREPARING), ROOMY, ScriptedBroker.holding(), now_ms=NOW_MS, commit_margin_ms=0
    )

    assert (result.earliest_deadline_ms, result.seconds_left) == (None, None)
