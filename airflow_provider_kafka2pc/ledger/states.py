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
        return self in _DECIDED


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
_DECIDED = frozenset({_B.COMMIT_DECIDED, _B.ABORT_DECIDED, _B.COMMITTED, _B.ABORTED})

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


def check_batch_move(batch: str, current: BatchState, target: BatchState) -> None:
    if target not in BATCH_TRANSITIONS[current]:
        raise IllegalTransitionError(batch, current, target)


def check_participant_move(where: str, current: ParticipantState, target: ParticipantState) -> None:
    if target not in PARTICIPANT_TRANSITIONS[current]:
        raise IllegalTransitionError(where, current, target)
