"""The coordinator's transaction states, as Kafka's ``admin.TransactionState`` names them:
``parse`` maps any name it does not know to UNKNOWN, and ``open`` says which states hold
back read_committed consumers (README: recovery finds "open transactions on the broker")."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from airflow_provider_kafka2pc.protocol.described import OPEN_STATES, CoordinatorTxnState

C = CoordinatorTxnState


@dataclass(frozen=True)
class _LibraryEnum:
    """Something with a ``value``, as a client library's own enum member is."""

    value: str


@pytest.mark.parametrize(
    ("name", "state"),
    [
        pytest.param("Empty", C.EMPTY, id="Empty -> EMPTY"),
        pytest.param("Ongoing", C.ONGOING, id="Ongoing -> ONGOING"),
        pytest.param("PrepareCommit", C.PREPARE_COMMIT, id="PrepareCommit -> PREPARE_COMMIT"),
        pytest.param("PrepareAbort", C.PREPARE_ABORT, id="PrepareAbort -> PREPARE_ABORT"),
        pytest.param("CompleteCommit", C.COMPLETE_COMMIT, id="CompleteCommit -> COMPLETE_COMMIT"),
        pytest.param("CompleteAbort", C.COMPLETE_ABORT, id="CompleteAbort -> COMPLETE_ABORT"),
        pytest.param(
            "PrepareEpochFence",
            C.PREPARE_EPOCH_FENCE,
            id="PrepareEpochFence -> PREPARE_EPOCH_FENCE",
        ),
        pytest.param("Dead", C.DEAD, id="Dead -> DEAD"),
        pytest.param("Unknown", C.UNKNOWN, id="Unknown -> UNKNOWN"),
        pytest.param(C.ONGOING, C.ONGOING, id="a member parses as itself"),
        pytest.param(_LibraryEnum("CompleteAbort"), C.COMPLETE_ABORT, id="a library enum's value"),
        pytest.param("ongoing", C.UNKNOWN, id="another spelling -> UNKNOWN (names are exact)"),
        pytest.param("TransitionalNewState", C.UNKNOWN, id="a newer broker's state -> UNKNOWN"),
        pytest.param("", C.UNKNOWN, id="empty -> UNKNOWN"),
        pytest.param(None, C.UNKNOWN, id="None -> UNKNOWN"),
        pytest.param(_LibraryEnum("Nope"), C.UNKNOWN, id="a library enum of an unknown name"),
    ],
)
def test_the_coordinators_state_names_parse_and_anything_else_is_unknown(name, state):
    assert C.parse(name) is state


@pytest.mark.parametrize(
    ("state", "is_open"),
    [
        pytest.param(C.EMPTY, False, id="EMPTY: nothing open"),
        pytest.param(C.ONGOING, True, id="ONGOING: open"),
        pytest.param(C.PREPARE_COMMIT, True, id="PREPARE_COMMIT: open until the markers land"),
        pytest.param(C.PREPARE_ABORT, True, id="PREPARE_ABORT: open until the markers land"),
        pytest.param(C.PREPARE_EPOCH_FENCE, True, id="PREPARE_EPOCH_FENCE: open (being fenced)"),
        pytest.param(C.COMPLETE_COMMIT, False, id="COMPLETE_COMMIT: ended"),
        pytest.param(C.COMPLETE_ABORT, False, id="COMPLETE_ABORT: ended"),
        pytest.param(C.DEAD, False, id="DEAD: ended"),
        pytest.param(C.UNKNOWN, False, id="UNKNOWN: not known to be open"),
    ],
)
def test_a_state_is_open_while_it_holds_back_the_last_stable_offset(state, is_open):
    assert state.open is is_open
    assert (state in OPEN_STATES) is is_open


def test_a_state_prints_as_kafka_spells_it():
    assert str(C.PREPARE_EPOCH_FENCE) == "PrepareEpochFence"
    assert f"{C.COMPLETE_ABORT}" == "CompleteAbort"
