"""The ledger's state machines (enums plus transition tables) and its errors.

The tables are data so that the store, the tests and the docs read the same rules;
:func:`check_batch_move` and :func:`check_participant_move` are the only places that
judge a move.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

from ..errors import IllegalTransitionError


class BatchState(enum.StrEnum):
    """Where one (export id, run key) batch stands in the two-phase commit."""

    PREPARING = "PREPARING"
    PREPARED = "PREPARED"
    COMMIT_DECIDED = "COMMIT_DECIDED"
    ABORT_DECIDED = "ABORT_DECIDED"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"

    @property
    def final(self) -> bool:
        return self in (BatchState.COMMITTED, BatchState.ABORTED)

    @property
    def decided(self) -> bool:
        """A verdict is recorded (and holds until a new attempt begins)."""
        return self in (
            BatchState.COMMIT_DECIDED,
            BatchState.ABORT_DECIDED,
            BatchState.COMMITTED,
            BatchState.ABORTED,
        )


class ParticipantState(enum.StrEnum):
    """The outcome of one prepared Kafka transaction (one Spark partition)."""

    PREPARED = "PREPARED"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"
    #: Gone on the broker (timed out or fenced) while the ledger still needed it.
    LOST = "LOST"

    @property
    def final(self) -> bool:
        return self in (ParticipantState.COMMITTED, ParticipantState.ABORTED)


class Verdict(enum.StrEnum):
    COMMIT = "COMMIT"
    ABORT = "ABORT"

    @property
    def decided_state(self) -> BatchState:
        return BatchState.COMMIT_DECIDED if self is Verdict.COMMIT else BatchState.ABORT_DECIDED


_B = BatchState

BATCH_TRANSITIONS: Mapping[BatchState, frozenset[BatchState]] = MappingProxyType(
    {
        _B.PREPARING: frozenset({_B.PREPARING, _B.PREPARED, _B.ABORT_DECIDED}),
        _B.PREPARED: frozenset({_B.PREPARING, _B.COMMIT_DECIDED, _B.ABORT_DECIDED}),
        _B.COMMIT_DECIDED: frozenset({_B.COMMITTED}),
        _B.ABORT_DECIDED: frozenset({_B.ABORTED}),
        _B.COMMITTED: frozenset(),
        # A new attempt of the same run key (attempt += 1).
        _B.ABORTED: frozenset({_B.PREPARING}),
    }
)

_P = ParticipantState
PARTICIPANT_TRANSITIONS: Mapping[ParticipantState, frozenset[ParticipantState]] = MappingProxyType(
    {
        _P.PREPARED: frozenset({_P.COMMITTED, _P.ABORTED, _P.LOST}),
        # Re-written by loss repair with a new committable.
        _P.LOST: frozenset({_P.PREPARED}),
        _P.COMMITTED: frozenset(),
        _P.ABORTED: frozenset(),
    }
)


#: The moves that cross the two machines: a participant's outcome never contradicts its
#: batch's verdict, and loss repair re-prepares only a batch still to be committed.
PARTICIPANT_MOVES_NEED_BATCH: Mapping[
    tuple[ParticipantState, ParticipantState], frozenset[BatchState]
] = MappingProxyType(
    {
        (_P.PREPARED, _P.COMMITTED): frozenset({_B.COMMIT_DECIDED}),
        (_P.PREPARED, _P.ABORTED): frozenset({_B.ABORT_DECIDED}),
        (_P.LOST, _P.PREPARED): frozenset({_B.PREPARED, _B.COMMIT_DECIDED}),
    }
)


def check_batch_move(batch: str, current: BatchState, target: BatchState) -> None:
    if target not in BATCH_TRANSITIONS[current]:
        raise IllegalTransitionError(batch, current, target)


def check_participant_move(
    where: str,
    current: ParticipantState,
    target: ParticipantState,
    batch: BatchState | None = None,
) -> None:
    """Judge a participant's move by its table and, given its batch's state, by
    :data:`PARTICIPANT_MOVES_NEED_BATCH`."""
    if target not in PARTICIPANT_TRANSITIONS[current]:
        raise IllegalTransitionError(where, current, target)
    needs = PARTICIPANT_MOVES_NEED_BATCH.get((current, target))
    if batch is not None and needs is not None and batch not in needs:
        wanted = " or ".join(sorted(needs))
        why = f"the batch is {batch}, not {wanted}"
        raise IllegalTransitionError(where, current, target, why)
