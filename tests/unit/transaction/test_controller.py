"""The controller's rules that need no broker: every EndTxn answer maps to one action, and
what each outcome means.

README ("The transaction core"): every EndTxn error code maps to one action in
``END_TXN_ACTIONS``; "fenced" and "invalid state" are resolved from the log, never read as
committed, and so is a success answer. ``LOST`` means aborted before our commit.
"""

from __future__ import annotations

import pytest

from airflow_provider_kafka2pc.transaction.controller import (
    END_TXN_ACTIONS,
    EndTxnAction,
    Outcome,
    classify_end_txn,
)
from airflow_provider_kafka2pc.transaction.protocol import ControlType, ErrorCode

E = ErrorCode
A = EndTxnAction

EXPECTED_END_TXN_ACTIONS = {
    E.NONE: A.VERIFY,
    E.COORDINATOR_LOAD_IN_PROGRESS: A.REFIND_COORDINATOR,
    E.COORDINATOR_NOT_AVAILABLE: A.REFIND_COORDINATOR,
    E.NOT_COORDINATOR: A.REFIND_COORDINATOR,
    E.CONCURRENT_TRANSACTIONS: A.RETRY,
    E.REQUEST_TIMED_OUT: A.RETRY,
    E.PRODUCER_FENCED: A.RESOLVE_FROM_LOG,
    E.INVALID_PRODUCER_EPOCH: A.RESOLVE_FROM_LOG,
    E.INVALID_TXN_STATE: A.RESOLVE_FROM_LOG,
    E.INVALID_PRODUCER_ID_MAPPING: A.RESOLVE_FROM_LOG,
    E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: A.FATAL,
    E.CLUSTER_AUTHORIZATION_FAILED: A.FATAL,
}
WHY = {
    A.VERIFY: "accepted, confirmed from the markers",
    A.REFIND_COORDINATOR: "the coordinator moved or is loading",
    A.RETRY: "the same request later",
    A.RESOLVE_FROM_LOG: "never read as committed: the log decides",
    A.FATAL: "no retry can mend it",
}


@pytest.mark.parametrize(
    ("code", "action"),
    [
        pytest.param(
            code,
            EXPECTED_END_TXN_ACTIONS.get(code, A.FATAL),
            id=f"{code.name} -> {EXPECTED_END_TXN_ACTIONS.get(code, A.FATAL).name}: "
            f"{WHY[EXPECTED_END_TXN_ACTIONS.get(code, A.FATAL)]}",
        )
        for code in ErrorCode
    ]
    + [pytest.param(12345, A.FATAL, id="a code nobody knows -> FATAL")],
)
def test_every_end_txn_answer_maps_to_exactly_one_action(code, action):
    assert classify_end_txn(code) is action


def test_the_end_txn_table_lists_exactly_the_answers_that_are_not_fatal():
    assert dict(END_TXN_ACTIONS) == EXPECTED_END_TXN_ACTIONS


@pytest.mark.parametrize(
    ("outcome", "committed", "aborted"),
    [
        pytest.param(Outcome.COMMITTED, True, False, id="COMMITTED: committed"),
        pytest.param(Outcome.ALREADY_COMMITTED, True, False, id="ALREADY_COMMITTED: committed"),
        pytest.param(Outcome.ABORTED, False, True, id="ABORTED: aborted"),
        pytest.param(Outcome.ALREADY_ABORTED, False, True, id="ALREADY_ABORTED: aborted"),
        pytest.param(Outcome.LOST, False, True, id="LOST: aborted before our commit"),
    ],
)
def test_an_outcome_is_either_committed_or_aborted(outcome, committed, aborted):
    assert (outcome.committed, outcome.aborted) == (committed, aborted)


@pytest.mark.parametrize(
    ("control", "ended_by", "sought"),
    [
        pytest.param(
            ControlType.COMMIT,
            Outcome.COMMITTED,
            {Outcome.COMMITTED, Outcome.ALREADY_COMMITTED},
            id="COMMIT: ends COMMITTED; holds when committed by anyone",
        ),
        pytest.param(
            ControlType.ABORT,
            Outcome.ABORTED,
            {Outcome.ABORTED, Outcome.ALREADY_ABORTED},
            id="ABORT: ends ABORTED; holds when aborted by anyone, LOST excluded",
        ),
    ],
)
def test_a_control_type_names_the_outcome_it_makes_and_the_outcomes_that_satisfy_it(
    control, ended_by, sought
):
    assert Outcome.ended_by(control) is ended_by
    assert Outcome.sought(control) == sought
