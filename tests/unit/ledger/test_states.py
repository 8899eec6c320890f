"""The ledger's two state machines, every move of each: the full cross product of states,
the legal moves written out here (with why each exists) and every other one refused.

The expected tables are spelt out rather than read from ``BATCH_TRANSITIONS`` /
``PARTICIPANT_TRANSITIONS``, so a change to either table fails here and must be argued.
"""

from __future__ import annotations

from itertools import product

import pytest

from airflow_provider_kafka2pc.errors import IllegalTransitionError
from airflow_provider_kafka2pc.ledger import (
    BATCH_TRANSITIONS,
    PARTICIPANT_TRANSITIONS,
    BatchState,
    ParticipantState,
    Verdict,
)
from airflow_provider_kafka2pc.ledger.states import check_batch_move, check_participant_move

B = BatchState
P = ParticipantState

LEGAL_BATCH_MOVES = {
    (B.PREPARING, B.PREPARING): "the prepare runs again before any verdict",
    (B.PREPARING, B.PREPARED): "the prepare recorded its participants",
    (B.PREPARING, B.ABORT_DECIDED): "the prepare failed or a stale batch is decided ABORT",
    (B.PREPARED, B.PREPARING): "a rerun prepares again before any verdict",
    (B.PREPARED, B.COMMIT_DECIDED): "the verdict COMMIT",
    (B.PREPARED, B.ABORT_DECIDED): "the verdict ABORT",
    (B.COMMIT_DECIDED, B.COMMITTED): "every participant committed",
    (B.ABORT_DECIDED, B.ABORTED): "every participant aborted",
    (B.ABORTED, B.PREPARING): "a new attempt of the same run key",
}

LEGAL_PARTICIPANT_MOVES = {
    (P.PREPARED, P.COMMITTED): "committed by the COMMIT verdict",
    (P.PREPARED, P.ABORTED): "aborted by the ABORT verdict",
    (P.PREPARED, P.LOST): "gone on the broker (timed out or fenced)",
    (P.LOST, P.PREPARED): "re-written by loss repair with a new committable",
}


def _moves(states, legal):
    return [
        pytest.param(
            current,
            target,
            (current, target) in legal,
            id=(
                f"{current.value} -> {target.value} is legal: {legal[(current, target)]}"
                if (current, target) in legal
                else f"{current.value} -> {target.value} is illegal"
            ),
        )
        for current, target in product(states, states)
    ]


@pytest.mark.parametrize(("current", "target", "legal"), _moves(BatchState, LEGAL_BATCH_MOVES))
def test_a_batch_moves_only_along_its_transition_table(current, target, legal):
    if legal:
        check_batch_move("exp/run-b", current, target)
        assert target in BATCH_TRANSITIONS[current]
        return
    with pytest.raises(IllegalTransitionError) as refused:
        check_batch_move("exp/run-b", current, target)
    assert str(refused.value) == (
        f"batch exp/run-b: illegal transition {current.value} -> {target.value}"
    )
    assert (refused.value.current, refused.value.target) == (current, target)


@pytest.mark.parametrize(
    ("current", "target", "legal"), _moves(ParticipantState, LEGAL_PARTICIPANT_MOVES)
)
def test_a_participant_moves_only_along_its_transition_table(current, target, legal):
    where = "exp/run-b exp-0"
    if legal:
        check_participant_move(where, current, target)
        assert target in PARTICIPANT_TRANSITIONS[current]
        return
    with pytest.raises(IllegalTransitionError) as refused:
        check_participant_move(where, current, target)
    assert f"illegal transition {current.value} -> {target.value}" in str(refused.value)
    assert (refused.value.current, refused.value.target) == (current, target)


def test_the_tables_hold_exactly_the_legal_moves_and_every_state():
    assert set(BATCH_TRANSITIONS) == set(BatchState)
    assert set(PARTICIPANT_TRANSITIONS) == set(ParticipantState)
    assert {(a, b) for a, bs in BATCH_TRANSITIONS.items() for b in bs} == set(LEGAL_BATCH_MOVES)
    assert {(a, b) for a, bs in PARTICIPANT_TRANSITIONS.items() for b in bs} == set(
        LEGAL_PARTICIPANT_MOVES
    )


@pytest.mark.parametrize(
    ("state", "final", "decided"),
    [
        pytest.param(B.PREPARING, False, False, id="PREPARING: neither final nor decided"),
        pytest.param(B.PREPARED, False, False, id="PREPARED: neither final nor decided"),
        pytest.param(B.COMMIT_DECIDED, False, True, id="COMMIT_DECIDED: decided, not final"),
        pytest.param(B.ABORT_DECIDED, False, True, id="ABORT_DECIDED: decided, not final"),
        pytest.param(B.COMMITTED, True, True, id="COMMITTED: final and decided"),
        pytest.param(B.ABORTED, True, True, id="ABORTED: final and decided"),
    ],
)
def test_a_batch_state_says_whether_it_is_final_and_whether_a_verdict_is_recorded(
    state, final, decided
):
    assert (state.final, state.decided) == (final, decided)


@pytest.mark.parametrize(
    ("state", "final"),
    [
        pytest.param(P.PREPARED, False, id="PREPARED: not final"),
        pytest.param(P.COMMITTED, True, id="COMMITTED: final"),
        pytest.param(P.ABORTED, True, id="ABORTED: final"),
        pytest.param(P.LOST, False, id="LOST: not final (loss repair re-writes it)"),
    ],
)
def test_a_participant_state_is_final_only_once_committed_or_aborted(state, final):
    assert state.final is final


@pytest.mark.parametrize(
    ("verdict", "state"),
    [
        pytest.param(Verdict.COMMIT, B.COMMIT_DECIDED, id="COMMIT -> COMMIT_DECIDED"),
        pytest.param(Verdict.ABORT, B.ABORT_DECIDED, id="ABORT -> ABORT_DECIDED"),
    ],
)
def test_a_verdict_moves_its_batch_to_the_matching_decided_state(verdict, state):
    assert verdict.decided_state is state
    assert state in BATCH_TRANSITIONS[B.PREPARED]


def test_a_final_batch_moves_on_only_by_a_new_attempt_after_an_abort():
    assert BATCH_TRANSITIONS[B.COMMITTED] == frozenset()
    assert BATCH_TRANSITIONS[B.ABORTED] == frozenset({B.PREPARING})
