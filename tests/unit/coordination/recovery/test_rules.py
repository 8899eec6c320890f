"""Recovery's rules as tables, checked row by row against the README's "Recovery and fault
tolerance": what recovery does with each in-doubt batch (``plan``) and with each open
transaction given the batch that holds its id (``classify``).

README, the rules these rows check:

* resolve each open transaction by the ledger's verdict: COMMIT with the same producer id
  and epoch: commit; anything else under a COMMIT verdict: fence, then finish; ABORT, or no
  verdict after the grace period, or no ledger record at all: abort and fence;
* a live run's transaction within the grace period is never touched.

Rows whose id starts ``README DIFFERS:`` test what the code does where it departs from
those two sentences: a batch with no verdict is decided ABORT as soon as its earliest
transaction has timed out, within the grace period too (the docstring of
``coordination.recovery`` says so, the README does not), so a live run's other, still open
transactions are aborted. ``README SILENT:`` rows apply a rule the README does not state.

An open transaction no ledger record holds and whose start the coordinator does not report
(``UNDATED_RULES``) is fenced once open past the grace period counted from when recovery
first saw it (same producer id and epoch; the ledger keeps the first sighting), no longer
left for ever.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_provider_kafka2pc.coordination.recovery.rules import (
    BatchAction,
    BatchPlan,
    TransactionAction,
    classify,
    plan,
)
from airflow_provider_kafka2pc.ledger import BatchState, Participant, Verdict
from airflow_provider_kafka2pc.ledger import ParticipantState as P
from airflow_provider_kafka2pc.protocol.described import CoordinatorTxnState
from tests.unit.builders import (
    EPOCH,
    EXPORT,
    GRACE,
    NOW,
    RUN,
    TIMEOUT_MS,
    batch,
    free_lease,
    lease,
    open_txn,
    participant,
    participants,
)

S = BatchState
B = BatchAction
T = TransactionAction
UNKNOWN = CoordinatorTxnState.UNKNOWN

# Ages against the 10 min grace period.
SECONDS = timedelta(seconds=42)
FRESH = timedelta(minutes=5)
JUST_UNDER = GRACE - timedelta(seconds=1)
AT_GRACE = GRACE
STALE = timedelta(minutes=20)
HOURS = timedelta(hours=2, minutes=10)

# Who waits on the round: this batch's own run, another run, or nobody (CLI, maintenance DAG).
OWN = RUN
OTHER = "run-c"
NOBODY = None

TIMEOUT = timedelta(milliseconds=TIMEOUT_MS)
#: Participants whose earliest transaction timeout has not come yet (opened just now).
OPEN = participants(P.PREPARED, P.PREPARED, P.PREPARED)
#: The earliest timeout passed a minute ago.
TIMED_OUT = participants(P.PREPARED, P.PREPARED, P.PREPARED, started=NOW - TIMEOUT - FRESH / 5)
#: The earliest timeout is exactly now.
TIMING_OUT_NOW = participants(P.PREPARED, P.PREPARED, P.PREPARED, started=NOW - TIMEOUT)
#: Only slot 2 timed out; the others are fresh.
ONE_TIMED_OUT = [*OPEN[:2], participant(2, started=NOW - 2 * TIMEOUT)]
#: KIP-939 2PC transactions opened a day ago: the coordinator never times them out.
KIP939_OLD = participants(P.PREPARED, P.PREPARED, started=NOW - timedelta(days=1), kip939=True)
#: Nothing was written a day ago: an empty committable opens no transaction, so no timeout.
EMPTY_OLD = participants(P.PREPARED, P.PREPARED, started=NOW - timedelta(days=1), records=0)
NONE: list[Participant] = []


def _row(state, waiting, age, parts, action, why, id):
    return pytest.param(state, waiting, age, parts, action, why, id=id)


PLAN_RULES = [
    # -- this run's own batch: its tasks carry it on, whatever its age ---------------------
    _row(
        S.ABORT_DECIDED,
        OWN,
        FRESH,
        OPEN,
        B.FINISH,
        "this run key's earlier attempt was decided ABORT",
        id="own run, ABORT_DECIDED, fresh -> FINISH its earlier attempt's ABORT",
    ),
    _row(
        S.ABORT_DECIDED,
        OWN,
        STALE,
        OPEN,
        B.FINISH,
        "this run key's earlier attempt was decided ABORT",
        id="own run, ABORT_DECIDED, stale -> FINISH its earlier attempt's ABORT",
    ),
    _row(
        S.COMMIT_DECIDED,
        OWN,
        STALE,
        OPEN,
        B.OWN,
        "this run's own batch",
        id="own run, COMMIT_DECIDED, stale -> OWN (its commit task finishes it)",
    ),
    _row(
        S.PREPARED,
        OWN,
        FRESH,
        OPEN,
        B.OWN,
        "this run's own batch",
        id="own run, PREPARED, fresh -> OWN",
    ),
    _row(
        S.PREPARING,
        OWN,
        STALE,
        TIMED_OUT,
        B.OWN,
        "this run's own batch",
        id="own run, PREPARING, stale and timed out -> OWN (never decided for it)",
    ),
    # -- another run's batch with a verdict: finished once stale ---------------------------
    _row(
        S.COMMIT_DECIDED,
        OTHER,
        FRESH,
        OPEN,
        B.LIVE,
        "verdict COMMIT 5 min 0 s ago; its run finishes it",
        id="other run, COMMIT verdict, within the grace period -> LIVE",
    ),
    _row(
        S.COMMIT_DECIDED,
        OTHER,
        FRESH,
        TIMED_OUT,
        B.LIVE,
        "verdict COMMIT 5 min 0 s ago; its run finishes it",
        id="other run, COMMIT verdict, fresh, timeout passed -> LIVE (a verdict is not redecided)",
    ),
    _row(
        S.COMMIT_DECIDED,
        NOBODY,
        JUST_UNDER,
        OPEN,
        B.LIVE,
        "verdict COMMIT 9 min 59 s ago",
        id="no waiting run, COMMIT verdict, 1 s under the grace period -> LIVE",
    ),
    _row(
        S.COMMIT_DECIDED,
        NOBODY,
        AT_GRACE,
        OPEN,
        B.FINISH,
        "verdict COMMIT unfinished for 10 min 0 s",
        id="no waiting run, COMMIT verdict, exactly the grace period -> FINISH COMMIT",
    ),
    _row(
        S.COMMIT_DECIDED,
        OTHER,
        STALE,
        TIMED_OUT,
        B.FINISH,
        "verdict COMMIT unfinished for 20 min 0 s",
        id="other run, COMMIT verdict, stale, timeout passed -> FINISH COMMIT (loss repair's job)",
    ),
    _row(
        S.ABORT_DECIDED,
        OTHER,
        SECONDS,
        OPEN,
        B.LIVE,
        "verdict ABORT 42 s ago; its run finishes it",
        id="other run, ABORT verdict, within the grace period -> LIVE",
    ),
    _row(
        S.ABORT_DECIDED,
        NOBODY,
        HOURS,
        NONE,
        B.FINISH,
        "verdict ABORT unfinished for 2 h 10 min",
        id="no waiting run, ABORT verdict, stale -> FINISH ABORT",
    ),
    # -- no verdict: decided ABORT once stale or past its earliest timeout -----------------
    _row(
        S.PREPARING,
        OTHER,
        SECONDS,
        NONE,
        B.LIVE,
        "PREPARING 42 s ago, within the grace period",
        id="other run, PREPARING, fresh, nothing opened -> LIVE",
    ),
    _row(
        S.PREPARED,
        NOBODY,
        FRESH,
        OPEN,
        B.LIVE,
        "PREPARED 5 min 0 s ago, within the grace period",
        id="no waiting run, PREPARED, fresh, timeout ahead -> LIVE",
    ),
    _row(
        S.PREPARED,
        OTHER,
        JUST_UNDER,
        OPEN,
        B.LIVE,
        "PREPARED 9 min 59 s ago, within the grace period",
        id="other run, PREPARED, 1 s under the grace period -> LIVE",
    ),
    _row(
        S.PREPARED,
        OTHER,
        AT_GRACE,
        OPEN,
        B.DECIDE_ABORT,
        "no verdict after 10 min 0 s (grace period 10 min 0 s)",
        id="other run, PREPARED, exactly the grace period -> DECIDE_ABORT",
    ),
    _row(
        S.PREPARING,
        NOBODY,
        STALE,
        NONE,
        B.DECIDE_ABORT,
        "no verdict after 20 min 0 s (grace period 10 min 0 s)",
        id="no waiting run, PREPARING, stale, nothing opened -> DECIDE_ABORT",
    ),
    _row(
        S.PREPARED,
        OTHER,
        FRESH,
        TIMED_OUT,
        B.DECIDE_ABORT,
        "its earliest transaction has timed out",
        id="README DIFFERS: other run, PREPARED, fresh, timed out -> DECIDE_ABORT in the grace",
    ),
    _row(
        S.PREPARING,
        OTHER,
        SECONDS,
        ONE_TIMED_OUT,
        B.DECIDE_ABORT,
        "its earliest transaction has timed out",
        id="README DIFFERS: other run, PREPARING, fresh, one of three timed out -> DECIDE_ABORT",
    ),
    _row(
        S.PREPARED,
        NOBODY,
        FRESH,
        TIMING_OUT_NOW,
        B.DECIDE_ABORT,
        "its earliest transaction has timed out",
        id="README DIFFERS: no waiting run, PREPARED, fresh, timeout exactly now -> DECIDE_ABORT",
    ),
    _row(
        S.PREPARED,
        OTHER,
        STALE,
        TIMED_OUT,
        B.DECIDE_ABORT,
        "its earliest transaction has timed out",
        id="other run, PREPARED, stale and timed out -> DECIDE_ABORT, the timeout named",
    ),
    _row(
        S.PREPARED,
        OTHER,
        FRESH,
        KIP939_OLD,
        B.LIVE,
        "PREPARED 5 min 0 s ago, within the grace period",
        id="other run, PREPARED, fresh, KIP-939 transactions a day old -> LIVE (no timeout)",
    ),
    _row(
        S.PREPARED,
        OTHER,
        FRESH,
        EMPTY_OLD,
        B.LIVE,
        "PREPARED 5 min 0 s ago, within the grace period",
        id="other run, PREPARED, fresh, empty committables a day old -> LIVE (none opened)",
    ),
    _row(
        S.PREPARED,
        OTHER,
        STALE,
        KIP939_OLD,
        B.DECIDE_ABORT,
        "no verdict after 20 min 0 s",
        id="other run, PREPARED, stale, KIP-939 transactions -> DECIDE_ABORT by the grace",
    ),
]


@pytest.mark.parametrize(("state", "waiting", "age", "parts", "action", "why"), PLAN_RULES)
def test_recovery_plans_each_in_doubt_batch_by_its_state_verdict_age_and_run(
    state, waiting, age, parts, action, why
):
    result = plan(batch(state, age=age), parts, own_run_key=waiting, now=NOW, grace_period=GRACE)

    got, reason, kept = result.action, result.why, result.participants
    assert got is action, reason
    assert why in reason
    assert kept == tuple(parts)


@pytest.mark.parametrize(
    ("state", "waiting", "age", "acts", "verdict"),
    [
        pytest.param(S.PREPARED, OWN, FRESH, False, None, id="OWN: does nothing, no verdict"),
        pytest.param(S.PREPARED, OTHER, FRESH, False, None, id="LIVE: does nothing"),
        pytest.param(
            S.COMMIT_DECIDED, OTHER, STALE, True, Verdict.COMMIT, id="FINISH: by the COMMIT verdict"
        ),
        pytest.param(
            S.ABORT_DECIDED, OTHER, STALE, True, Verdict.ABORT, id="FINISH: by the ABORT verdict"
        ),
        pytest.param(
            S.PREPARED, OTHER, STALE, True, Verdict.ABORT, id="DECIDE_ABORT: finishes by ABORT"
        ),
    ],
)
def test_a_batch_plan_acts_only_to_finish_and_by_the_verdict_it_records(
    state, waiting, age, acts, verdict
):
    result = plan(batch(state, age=age), OPEN, own_run_key=waiting, now=NOW, grace_period=GRACE)

    assert result.acts is acts
    assert result.verdict is verdict


def test_a_batch_plan_finds_a_participant_by_its_transactional_id():
    result = plan(batch(), OPEN, own_run_key=None, now=NOW, grace_period=GRACE)

    assert result.participant("exp-1") is OPEN[1]
    assert result.participant("exp-9") is None


# -- classify: one open transaction, given the batch that holds its id -----------------------


def holder(
    state: BatchState = S.COMMIT_DECIDED,
    *,
    age: timedelta = STALE,
    waiting: str | None = NOBODY,
    slot0: P | None = P.PREPARED,
    parts: list[Participant] | None = None,
) -> BatchPlan:
    """The plan of batch exp/run-b, which holds exp-0..2; its participant exp-0 is in
    ``slot0`` (None: it has none) with the recorded pid 42 epoch 3."""
    if parts is None:
        parts = [participant(i, P.PREPARED) for i in (1, 2)]
        if slot0 is not None:
            parts.insert(0, participant(0, slot0))
    return plan(batch(state, age=age), parts, own_run_key=waiting, now=NOW, grace_period=GRACE)


FINISH_COMMIT = "batch exp/run-b: verdict COMMIT unfinished for 20 min 0 s"
HELD_BY = f"{EXPORT}/{RUN}"


def _txn_row(holds, lease_, txn, action, live, held_by, why, id):
    return pytest.param(holds, lease_, txn, action, live, held_by, why, id=id)


CLASSIFY_RULES = [
    # -- no batch holds the id: the lease, then the broker's state and the age decide ------
    _txn_row(
        None,
        lease(export_id="other", run_key="r1"),
        open_txn(age=STALE),
        T.LEAVE,
        False,
        None,
        "leased by export 'other': not this export's",
        id="no batch, leased by another export -> LEAVE (not ours)",
    ),
    _txn_row(
        None,
        lease(export_id="other", run_key="r1"),
        open_txn(state=UNKNOWN),
        T.LEAVE,
        False,
        None,
        "leased by export 'other'",
        id="no batch, leased by another export, state unknown -> LEAVE (not ours)",
    ),
    _txn_row(
        None,
        lease(run_key="run-z"),
        open_txn(age=STALE),
        T.LEAVE,
        True,
        None,
        "leased by run 'run-z', begun after this round read the ledger",
        id="no batch, leased by this export, stale -> LEAVE live (a run begun since)",
    ),
    _txn_row(
        None,
        lease(run_key="run-z"),
        open_txn(state=UNKNOWN),
        T.LEAVE,
        True,
        None,
        "leased by run 'run-z'",
        id="no batch, leased by this export, state unknown -> LEAVE live",
    ),
    _txn_row(
        None,
        free_lease(),
        open_txn(state=UNKNOWN),
        T.FENCE,
        False,
        None,
        "no batch holds this id; the broker cannot say whether it is open: fenced to be sure",
        id="no batch, free lease, state unknown -> FENCE to be sure",
    ),
    _txn_row(
        None,
        None,
        open_txn(state=UNKNOWN),
        T.FENCE,
        False,
        None,
        "no ledger record of this id; the broker cannot say whether it is open",
        id="no ledger record, state unknown -> FENCE to be sure",
    ),
    _txn_row(
        None,
        None,
        open_txn(age=FRESH),
        T.LEAVE,
        True,
        None,
        "no ledger record of this id; opened 5 min 0 s ago, within the grace period 10 min 0 s",
        id="no ledger record, open within the grace period -> LEAVE live",
    ),
    _txn_row(
        None,
        None,
        open_txn(age=None),
        T.LEAVE,
        True,
        None,
        "no ledger record of this id; start not reported, first seen open 0 s ago, within "
        "the grace period",
        id="no ledger record, start time unknown, first sighting -> LEAVE live (see UNDATED)",
    ),
    _txn_row(
        None,
        None,
        open_txn(age=STALE),
        T.FENCE,
        False,
        None,
        "no ledger record of this id; open for 20 min 0 s (grace period 10 min 0 s)",
        id="no ledger record, open past the grace period -> FENCE",
    ),
    # A free lease: the id is back in the pool, its last batch final (the pool releases an
    # id only when its batch is COMMITTED or ABORTED), so what is open there opened after
    # that batch ended, a late opener: fenced at once, whatever its age. Against a run that
    # leases the id meanwhile: the round reads the broker before the ledger, a run opens only
    # after its lease, so a lease the round sees free cannot be of the run that opened what
    # the round found; a lease taken after that read is checked again before the fence.
    _txn_row(
        None,
        free_lease(),
        open_txn(age=timedelta(0)),
        T.FENCE,
        False,
        None,
        "pooled id exp-0 is back in the pool (its last batch finished), yet a transaction "
        f"(pid 42, epoch {EPOCH}) is open on it: a late opener, fenced at once",
        id="no batch, free lease, opened just now -> FENCE at once (a late opener)",
    ),
    _txn_row(
        None,
        free_lease(),
        open_txn(age=JUST_UNDER),
        T.FENCE,
        False,
        None,
        "is back in the pool (its last batch finished)",
        id="no batch, free lease, 1 s under the grace period -> FENCE at once",
    ),
    _txn_row(
        None,
        free_lease(),
        open_txn(age=AT_GRACE),
        T.FENCE,
        False,
        None,
        "a late opener, fenced at once",
        id="no batch, free lease, exactly the grace period -> FENCE",
    ),
    _txn_row(
        None,
        lease(run_key="run-z"),
        open_txn(age=timedelta(0)),
        T.LEAVE,
        True,
        None,
        "leased by run 'run-z', begun after this round read the ledger",
        id="no batch, the id leased again by a run since the broker was read -> LEAVE live",
    ),
    # -- a batch holds the id: its plan decides, the lease does not matter -----------------
    _txn_row(
        holder(S.PREPARED, waiting=OWN),
        None,
        open_txn(age=STALE),
        T.OWN,
        False,
        HELD_BY,
        "this run's own batch",
        id="own run's batch -> OWN",
    ),
    _txn_row(
        holder(S.PREPARED, age=FRESH),
        lease(export_id="other", run_key="r1"),
        open_txn(age=STALE),
        T.LEAVE,
        True,
        HELD_BY,
        "PREPARED 5 min 0 s ago, within the grace period",
        id="live batch, no verdict -> LEAVE live (even a stale transaction, any lease)",
    ),
    _txn_row(
        holder(S.COMMIT_DECIDED, age=FRESH),
        None,
        open_txn(pid=77),
        T.LEAVE,
        True,
        HELD_BY,
        "verdict COMMIT 5 min 0 s ago; its run finishes it",
        id="live batch, COMMIT verdict -> LEAVE live (even a foreign pid)",
    ),
    _txn_row(
        holder(S.ABORT_DECIDED),
        None,
        open_txn(),
        T.ABORT,
        False,
        HELD_BY,
        "batch exp/run-b: verdict ABORT unfinished for 20 min 0 s",
        id="stale ABORT verdict -> ABORT",
    ),
    _txn_row(
        holder(S.ABORT_DECIDED, age=FRESH, waiting=OWN),
        None,
        open_txn(),
        T.ABORT,
        False,
        HELD_BY,
        "batch exp/run-b: this run key's earlier attempt was decided ABORT",
        id="own run's earlier ABORT verdict -> ABORT",
    ),
    _txn_row(
        holder(S.PREPARED),
        None,
        open_txn(),
        T.ABORT,
        False,
        HELD_BY,
        "batch exp/run-b: no verdict after 20 min 0 s",
        id="no verdict after the grace period -> ABORT (even the recorded pid and epoch)",
    ),
    _txn_row(
        holder(S.PREPARED, age=FRESH, parts=ONE_TIMED_OUT),
        None,
        open_txn(age=FRESH),
        T.ABORT,
        False,
        HELD_BY,
        "batch exp/run-b: its earliest transaction has timed out",
        id="README DIFFERS: no verdict, fresh batch, exp-2 timed out -> ABORT exp-0, open 5 min",
    ),
    _txn_row(
        holder(),
        None,
        open_txn(),
        T.COMMIT,
        False,
        HELD_BY,
        FINISH_COMMIT,
        id="COMMIT verdict, participant PREPARED, same pid and epoch -> COMMIT",
    ),
    _txn_row(
        holder(),
        None,
        open_txn(state=UNKNOWN),
        T.COMMIT,
        False,
        HELD_BY,
        FINISH_COMMIT,
        id="README SILENT: COMMIT verdict, participant PREPARED, state unknown -> COMMIT",
    ),
    _txn_row(
        holder(),
        None,
        open_txn(pid=77, epoch=0),
        T.FENCE,
        False,
        HELD_BY,
        "batch exp/run-b: open as pid 77 epoch 0, but the recorded committable is pid 42 "
        "epoch 3: not ours to commit",
        id="COMMIT verdict, participant PREPARED, other pid -> FENCE",
    ),
    _txn_row(
        holder(),
        None,
        open_txn(epoch=EPOCH + 1),
        T.FENCE,
        False,
        HELD_BY,
        "open as pid 42 epoch 4, but the recorded committable is pid 42 epoch 3",
        id="COMMIT verdict, participant PREPARED, same pid, other epoch -> FENCE",
    ),
    _txn_row(
        holder(slot0=P.COMMITTED),
        None,
        open_txn(epoch=EPOCH + 1),
        T.FENCE,
        False,
        HELD_BY,
        "batch exp/run-b: its participant is already COMMITTED; this later transaction "
        "(pid 42, epoch 4) is not ours",
        id="COMMIT verdict, participant COMMITTED -> FENCE the later transaction",
    ),
    _txn_row(
        holder(slot0=P.LOST),
        None,
        open_txn(),
        T.FENCE,
        False,
        HELD_BY,
        "its participant is already LOST",
        id="COMMIT verdict, participant LOST, same pid and epoch -> FENCE",
    ),
    _txn_row(
        holder(slot0=P.ABORTED),
        None,
        open_txn(state=UNKNOWN),
        T.FENCE,
        False,
        HELD_BY,
        "its participant is already ABORTED",
        id="COMMIT verdict, participant ABORTED, state unknown -> FENCE",
    ),
    _txn_row(
        holder(slot0=None),
        None,
        open_txn(),
        T.FENCE,
        False,
        HELD_BY,
        "batch exp/run-b has a COMMIT verdict but no committable for exp-0: not ours",
        id="COMMIT verdict, no participant for the id -> FENCE",
    ),
]


@pytest.mark.parametrize(
    ("holds", "lease_", "txn", "action", "live", "held_by", "why"), CLASSIFY_RULES
)
def test_recovery_classifies_each_open_transaction_by_its_holder_lease_state_and_age(
    holds, lease_, txn, action, live, held_by, why
):
    result = classify(txn, holds, lease_, export_id=EXPORT, now=NOW, grace_period=GRACE)

    judged, got, reason = result.txn, result.action, result.why
    key, left_live = result.batch_key, result.live
    assert got is action, reason
    assert why in reason
    assert left_live is live
    assert (None if key is None else str(key)) == held_by
    assert judged is txn


# -- no record, no start time: the grace period runs from the first sighting ---------------

UNDATED = open_txn(age=None)


def _undated_row(lease_, first_seen_ago, action, live, why, id):
    return pytest.param(lease_, first_seen_ago, action, live, why, id=id)


UNDATED_RULES = [
    _undated_row(
        None,
        None,
        T.LEAVE,
        True,
        "first seen open 0 s ago, within the grace period 10 min 0 s",
        id="never seen before (a dry run's first look) -> LEAVE live",
    ),
    _undated_row(
        None,
        SECONDS,
        T.LEAVE,
        True,
        "first seen open 42 s ago, within the grace period",
        id="first seen 42 s ago -> LEAVE live",
    ),
    _undated_row(
        None,
        JUST_UNDER,
        T.LEAVE,
        True,
        "first seen open 9 min 59 s ago, within the grace period",
        id="first seen a second inside the grace period -> LEAVE live",
    ),
    _undated_row(
        None,
        AT_GRACE,
        T.FENCE,
        False,
        "no ledger record of this id; start not reported, open since recovery first saw it "
        "10 min 0 s ago (grace period 10 min 0 s)",
        id="first seen exactly the grace period ago -> FENCE",
    ),
    _undated_row(
        None,
        HOURS,
        T.FENCE,
        False,
        "open since recovery first saw it 2 h 10 min ago",
        id="first seen hours ago -> FENCE",
    ),
    _undated_row(
        free_lease(),
        STALE,
        T.FENCE,
        False,
        "is back in the pool (its last batch finished)",
        id="free lease, first seen 20 min ago -> FENCE",
    ),
    _undated_row(
        free_lease(),
        None,
        T.FENCE,
        False,
        "a late opener, fenced at once",
        id="free lease, never seen before -> FENCE at once (a late opener)",
    ),
    _undated_row(
        lease(),
        HOURS,
        T.LEAVE,
        True,
        "leased by run",
        id="leased by a run that began after the round read the ledger -> LEAVE live, whatever "
        "the sighting",
    ),
]


@pytest.mark.parametrize(("lease_", "first_seen_ago", "action", "live", "why"), UNDATED_RULES)
def test_an_undated_transaction_no_record_holds_is_fenced_past_the_grace_from_first_sighting(
    lease_, first_seen_ago, action, live, why
):
    first_seen = None if first_seen_ago is None else NOW - first_seen_ago
    result = classify(
        UNDATED, None, lease_, export_id=EXPORT, now=NOW, grace_period=GRACE, first_seen=first_seen
    )

    assert result.action is action, result.why
    assert why in result.why
    assert result.live is live
    assert result.batch_key is None


def test_a_sighting_does_not_change_what_a_holder_or_a_dated_transaction_gets():
    """The first sighting only dates what the coordinator does not: a dated transaction is
    judged by its own start, a held one by its batch."""
    long_ago = NOW - HOURS
    dated = classify(
        open_txn(age=FRESH),
        None,
        None,
        export_id=EXPORT,
        now=NOW,
        grace_period=GRACE,
        first_seen=long_ago,
    )
    assert dated.action is T.LEAVE and dated.live, dated.why
    held = classify(
        open_txn(age=None),
        holder(),
        None,
        export_id=EXPORT,
        now=NOW,
        grace_period=GRACE,
        first_seen=long_ago,
    )
    assert held.action is T.COMMIT, held.why
