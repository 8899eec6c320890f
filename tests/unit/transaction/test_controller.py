"""The controller's rules that need no broker: every EndTxn answer maps to one action, and
what each outcome means.

README ("The transaction core"): every EndTxn error code maps to one action in
``END_TXN_ACTIONS``; "fenced" and "invalid state" are resolved from the log, never read as
committed, and so is a success answer. ``LOST`` means aborted before our commit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_kafka2pc.protocol.codes import ErrorCode
from airflow_provider_kafka2pc.protocol.records import ControlType
from airflow_provider_kafka2pc.transaction.controller import (
    END_TXN_ACTIONS,
    EndTxnAction,
    Outcome,
    classify_end_txn,
)
from devtools.broker_answers import COL_ANSWER, COL_OUTCOME, COL_V5, read_document

E = ErrorCode
A = EndTxnAction

#: What a real broker answered to EndTxn, situation by situation: docs/broker-answers.md,
#: printed from Apache Kafka 4.4.0 and 3.9.2 by scripts/broker_answers.py and replayed live by
#: tests/integration/test_broker_answers.py. The actions of the answers seen there are derived
#: from what the broker did, not copied from the product's table (below).
BROKER_ANSWERS = read_document(Path(__file__).resolve().parents[3] / "docs" / "broker-answers.md")


def _observed() -> list[tuple[str, str, str, str]]:
    """(where, request, answer, what the transaction really became) for every final EndTxn
    answer a real broker gave, the controller's and the bare v5 one."""
    fate = {
        "COMMITTED": "committed",
        "ALREADY_COMMITTED": "committed",
        "LOST": "aborted",
        "TransactionInDoubtError": "unknown",
    }
    seen = []
    for (version, heading), rows in BROKER_ANSWERS.items():
        for situation, cells in rows.items():
            truth = fate[cells[COL_OUTCOME]]
            cells_seen = [cells[COL_ANSWER].split(": ", 1)[1]]
            if cells.get(COL_V5):
                cells_seen.append(cells[COL_V5])
            for answers in cells_seen:
                *_, final = answers.split(" → ")
                where = f"{version} {heading.removeprefix('### ')}: {situation}"
                seen.append((where, cells["request"], final, truth))
    return seen


OBSERVED = _observed()


def _derived_action(answer: str) -> EndTxnAction:
    """The action a real broker's answers call for. A success answer the broker also gave
    where the request did not take effect (a bare v5 abort of a committed transaction
    answered NONE) proves nothing alone: confirm it from the markers (VERIFY). An error
    answer the broker gave to a transaction whose fate was already sealed, committed or
    aborted or unknown, says nothing about which: the log decides (RESOLVE_FROM_LOG)."""
    if answer == "NONE":
        assert any(
            a == "NONE" and truth != {"commit": "committed", "abort": "aborted"}[request]
            for _, request, a, truth in OBSERVED
        ), "the broker never answered NONE to a request that did not take effect"
        return A.VERIFY
    fates = {truth for _, _, a, truth in OBSERVED if a == answer}
    assert fates, answer
    return A.RESOLVE_FROM_LOG


#: The answers the brokers gave in docs/broker-answers.md, with their derived actions.
OBSERVED_ACTIONS = {E[a]: _derived_action(a) for a in sorted({o[2] for o in OBSERVED})}
#: Answers no single broker gives on demand (a coordinator moving or loading, a concurrent
#: end, a timeout, authorization), with the action Kafka's protocol documents for them:
#: retriable ones are retried (after finding the coordinator again where it moved),
#: authorization failures are not.
PROTOCOL_ACTIONS = {
    E.COORDINATOR_LOAD_IN_PROGRESS: A.REFIND_COORDINATOR,
    E.COORDINATOR_NOT_AVAILABLE: A.REFIND_COORDINATOR,
    E.NOT_COORDINATOR: A.REFIND_COORDINATOR,
    E.CONCURRENT_TRANSACTIONS: A.RETRY,
    E.REQUEST_TIMED_OUT: A.RETRY,
    E.INVALID_PRODUCER_EPOCH: A.RESOLVE_FROM_LOG,
    E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: A.FATAL,
    E.CLUSTER_AUTHORIZATION_FAILED: A.FATAL,
}
EXPECTED_END_TXN_ACTIONS = {**PROTOCOL_ACTIONS, **OBSERVED_ACTIONS}
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


def test_the_broker_answers_document_holds_every_situation_on_both_versions():
    """The derivation stands on the real broker's rows: none may silently go missing."""
    assert set(OBSERVED_ACTIONS) >= {E.NONE, E.PRODUCER_FENCED, E.INVALID_TXN_STATE}
    # 4.4.0: 7 classic rows (the controller's answer and the bare v5 one) and 7 KIP-890
    # rows; 3.9.2: 7 classic rows.
    assert len(OBSERVED) == 7 * 2 + 7 + 7, len(OBSERVED)


@pytest.mark.parametrize(
    ("where", "request_", "answer", "truth"), OBSERVED, ids=[o[0] for o in OBSERVED]
)
def test_no_answer_a_real_broker_gave_is_taken_at_its_word(where, request_, answer, truth):
    """Each final answer of docs/broker-answers.md leads to the markers (VERIFY or
    RESOLVE_FROM_LOG): never a retry that cannot change it, never FATAL for a sealed fate."""
    assert classify_end_txn(E[answer]) in (A.VERIFY, A.RESOLVE_FROM_LOG), (where, truth)


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
