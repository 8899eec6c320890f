"""The control plane: finish prepared transactions from any process, and say how they ended.

A commit is "act, verify": send EndTxn with the stored producer id and epoch at the
request version the writer's client used, then read the partitions' markers. Every
EndTxn answer maps to exactly one action in :data:`END_TXN_ACTIONS`; "fenced" and
"invalid state" never count as committed: the log decides, and so does it for a
success answer (a broker may answer NONE and do nothing).
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .committable import TRANSACTION_VERSION_KIP890, Committable
from .errors import ProtocolError, TransactionInDoubtError
from .log import LogReader, TransactionState, transaction_states
from .naming import validate_transactional_id
from .protocol import ApiKey, ConnectionLostError, ErrorCode, TransactionProtocol, error_name

log = logging.getLogger(__name__)

#: librdkafka speaks classic transactions only: EndTxn v5 would switch a Kafka 4.x
#: coordinator to KIP-890 semantics the transaction was not started under.
CLASSIC_END_TXN_MAX_VERSION = 4
KIP890_END_TXN_VERSION = 5


class Outcome(enum.Enum):
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"
    ALREADY_COMMITTED = "ALREADY_COMMITTED"
    ALREADY_ABORTED = "ALREADY_ABORTED"
    #: Aborted (by timeout, fencing or an earlier abort) before our commit: its
    #: records are not visible and must be written again if the verdict was COMMIT.
    LOST = "LOST"

    @property
    def committed(self) -> bool:
        return self in (Outcome.COMMITTED, Outcome.ALREADY_COMMITTED)

    @property
    def aborted(self) -> bool:
        return self in (Outcome.ABORTED, Outcome.ALREADY_ABORTED, Outcome.LOST)


class Action(enum.Enum):
    VERIFY = "verify"  # the broker accepted; confirm from the markers
    REFIND_COORDINATOR = "refind"  # the coordinator moved or is loading
    RETRY = "retry"  # the same request later
    RESOLVE_FROM_LOG = "resolve"  # ambiguous for our purpose: the markers decide
    FATAL = "fatal"  # a known failure no retry can mend


END_TXN_ACTIONS: dict[int, Action] = {
    ErrorCode.NONE: Action.VERIFY,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: Action.REFIND_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: Action.REFIND_COORDINATOR,
    ErrorCode.NOT_COORDINATOR: Action.REFIND_COORDINATOR,
    ErrorCode.CONCURRENT_TRANSACTIONS: Action.RETRY,
    ErrorCode.REQUEST_TIMED_OUT: Action.RETRY,
    ErrorCode.PRODUCER_FENCED: Action.RESOLVE_FROM_LOG,
    ErrorCode.INVALID_PRODUCER_EPOCH: Action.RESOLVE_FROM_LOG,
    ErrorCode.INVALID_TXN_STATE: Action.RESOLVE_FROM_LOG,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: Action.RESOLVE_FROM_LOG,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Action.FATAL,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: Action.FATAL,
}
"""EndTxn answer -> action. Anything not listed is an unknown failure: FATAL."""

#: Answers after which the coordinator can never commit this producer epoch.
_TERMINAL_FOR_EPOCH = {
    ErrorCode.PRODUCER_FENCED,
    ErrorCode.INVALID_PRODUCER_EPOCH,
}
_RETRIABLE_COORDINATOR = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.CONCURRENT_TRANSACTIONS,
}


def classify_end_txn(code: int) -> Action:
    return END_TXN_ACTIONS.get(code, Action.FATAL)


def _unknown_to_coordinator(c: Committable) -> TransactionInDoubtError:
    """INVALID_PRODUCER_ID_MAPPING with the records not ended in the log.

    The coordinator forgets an id only after its transaction ended (then the markers
    decide), so open records mean the committable does not name their owner: nobody
    can end them through this id, and nothing says they will not commit. Not LOST,
    which would have them written again.
    """
    return TransactionInDoubtError(
        f"the transaction coordinator knows no producer id {c.producer_id} under "
        f"transactional id {c.transactional_id!r} (INVALID_PRODUCER_ID_MAPPING), yet "
        "its records have no end marker in the log: the committable names the wrong "
        "transactional id or cluster. "
        "Nothing was changed; check the committable, or retry after the transaction's "
        f"timeout ({time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(c.deadline_ms / 1000))}), "
        "when the log decides"
    )


@dataclass(frozen=True)
class Resolution:
    """How one committable ended, and why we believe it."""

    outcome: Outcome
    transactional_id: str
    producer_id: int
    producer_epoch: int
    record_count: int
    reason: str
    attempts: int

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["outcome"] = self.outcome.value
        return data


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff under an overall deadline."""

    deadline_s: float = 60.0
    #: How long to wait for markers after an ambiguous answer before acting on it.
    marker_grace_s: float = 5.0
    initial_backoff_s: float = 0.05
    max_backoff_s: float = 1.0

    def backoff(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.initial_backoff_s * 2 ** max(0, attempt - 1))


@dataclass(frozen=True)
class FenceResult:
    transactional_id: str
    producer_id: int
    producer_epoch: int


class TransactionController:
    """Commits, aborts and fences transactions through a :class:`TransactionProtocol`.

    :param protocol: the broker connection (a scripted one in unit tests).
    :param policy: retry deadline and backoff.
    :param clock: monotonic seconds; injectable with ``sleep`` for tests.
    """

    def __init__(
        self,
        protocol: TransactionProtocol,
        policy: RetryPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._protocol = protocol
        self._policy = policy or RetryPolicy()
        self._clock = clock
        self._sleep = sleep
        self._reader = LogReader(protocol)
        self._coordinators: dict[str, int] = {}

    def commit(self, committable: Committable) -> Resolution:
        return self.commit_all([committable])[0]

    def abort(self, committable: Committable) -> Resolution:
        return self.abort_all([committable])[0]

    def commit_all(self, committables: Sequence[Committable]) -> list[Resolution]:
        """Commit every committable; the log is read once per partition and phase."""
        return self._finish_all(committables, commit=True)

    def abort_all(self, committables: Sequence[Committable]) -> list[Resolution]:
        return self._finish_all(committables, commit=False)

    # -- finishing ----------------------------------------------------------

    def _finish_all(self, committables: Sequence[Committable], commit: bool) -> list[Resolution]:
        """Send EndTxn to every transaction, then verify each from the log's markers.

        The log is not scanned before acting: EndTxn on a finished transaction is
        harmless (an idempotent success or an error we resolve from the log), while
        reading a large run's data back twice is not. The verification reads only
        what was appended after the ends noted first, where fresh markers land; a
        transaction with no marker there is looked up over its whole range once, which
        finds markers that were already in the log (``ALREADY_*``).
        """
        verb = "commit" if commit else "abort"
        results: list[Resolution | None] = [None] * len(committables)

        def resolved(index: int, outcome: Outcome, reason: str, attempts: int) -> None:
            c = committables[index]
            log.info(
                "%s %s (pid %s, epoch %s): %s, %s",
                verb,
                c.transactional_id,
                c.producer_id,
                c.producer_epoch,
                outcome.value,
                reason,
            )
            results[index] = Resolution(
                outcome,
                c.transactional_id,
                c.producer_id,
                c.producer_epoch,
                c.record_count,
                reason,
                attempts,
            )

        for i, c in enumerate(committables):
            if c.is_empty:
                done = Outcome.COMMITTED if commit else Outcome.ABORTED
                resolved(i, done, "no records were written, no transaction was opened", 0)
        todo = [i for i, r in enumerate(results) if r is None]
        ends = self._reader.log_ends(p for i in todo for p in committables[i].partitions)

        deadline = self._clock() + self._policy.deadline_s
        accepted: dict[int, int] = {}  # index -> attempts, for EndTxn answered NONE
        for i in todo:
            outcome, reason, attempts = self._end(committables[i], commit, deadline)
            if outcome is None:
                accepted[i] = attempts
            else:
                resolved(i, outcome, reason, attempts)

        # Markers follow the coordinator's answer, partition by partition.
        attempt = 0
        looked_back = False
        while accepted:
            waiting = list(accepted)
            fresh = self._states([committables[i] for i in waiting], since=ends)
            unmarked = []  # no fresh marker at all: perhaps it was finished before
            for i, state in zip(waiting, fresh, strict=True):
                if None not in state.markers:
                    outcome = self._from_markers(state, commit, sent=True)
                    if outcome is not None:
                        resolved(i, outcome, "EndTxn answered NONE", accepted.pop(i))
                elif state.open:
                    unmarked.append(i)
            if unmarked and not looked_back:
                looked_back = True
                waiting = unmarked
                whole = self._states([committables[i] for i in waiting])
                # Apache Kafka writes markers after answering EndTxn: ours may have landed
                # between the two reads, so what the look-back finds is only "already" if
                # it still lies before the ends noted first.
                found = [i for i, st in zip(waiting, whole, strict=True) if None not in st.markers]
                late = self._states([committables[i] for i in found], since=ends)
                for i, fresh_now in zip(found, late, strict=True):
                    state = whole[waiting.index(i)]
                    if None not in fresh_now.markers:
                        outcome = self._from_markers(fresh_now, commit, sent=True)
                        reason = "EndTxn answered NONE"
                    else:
                        outcome = self._from_markers(state, commit, sent=False)
                        reason = "EndTxn answered NONE; markers were already in the log"
                    if outcome is not None:
                        resolved(i, outcome, reason, accepted.pop(i))
            if accepted and self._clock() >= deadline:
                ids = [committables[i].transactional_id for i in accepted]
                raise TransactionInDoubtError(
                    f"{verb} of {ids} accepted by the coordinator but no markers in the log "
                    "by the deadline; the transactions may still be open; retry later"
                )
            if accepted:
                attempt += 1
                self._sleep(self._policy.backoff(attempt))
        return [r for r in results if r is not None]

    def _end(
        self, c: Committable, commit: bool, deadline: float
    ) -> tuple[Outcome | None, str, int]:
        """Send EndTxn until an answer settles it.

        Returns (outcome, or None when accepted and to be verified; reason; attempts).
        """
        attempt = 0
        last = "no answer"
        while True:
            attempt += 1
            try:
                code: int | None = self._end_txn(c, commit)
            except ConnectionLostError as exc:
                # Some brokers drop the connection instead of answering a stale epoch;
                # the markers tell whether the transaction ended meanwhile.
                code, last = None, str(exc)
                self._coordinators.pop(c.transactional_id, None)
            if code is None:
                state = self._states([c])[0]
                outcome = None if state.open else self._from_markers(state, commit, sent=False)
                if outcome is not None:
                    return outcome, f"markers in the log after {last}", attempt
            else:
                last = error_name(code)
                action = classify_end_txn(code)
                if action is Action.FATAL:
                    raise ProtocolError(f"EndTxn for {c.transactional_id!r} failed: {last}", last)
                if action is Action.VERIFY:
                    return None, f"EndTxn answered {last}", attempt
                if action is Action.REFIND_COORDINATOR:
                    self._coordinators.pop(c.transactional_id, None)
                if action is Action.RESOLVE_FROM_LOG:
                    grace = min(deadline, self._clock() + self._policy.marker_grace_s)
                    outcome = self._await_markers(c, commit, grace)
                    if outcome is not None:
                        return outcome, f"EndTxn answered {last}", attempt
                    if code in _TERMINAL_FOR_EPOCH:
                        # This epoch can never be committed by anyone; no marker yet
                        # means the coordinator's abort is still being written.
                        lost = Outcome.LOST if commit else Outcome.ALREADY_ABORTED
                        return lost, f"EndTxn answered {last}, no marker yet", attempt
                    if code == ErrorCode.INVALID_PRODUCER_ID_MAPPING:
                        raise _unknown_to_coordinator(c)
            if self._clock() >= deadline:
                raise TransactionInDoubtError(
                    f"{'commit' if commit else 'abort'} of {c.transactional_id!r} unresolved "
                    f"after {attempt} attempts ({last}); the transaction may still be open; "
                    "retry later"
                )
            self._sleep(self._policy.backoff(attempt))

    def _end_txn(self, c: Committable, commit: bool) -> int:
        node = self._coordinator(c.transactional_id)
        return self._protocol.end_txn(
            node,
            c.transactional_id,
            c.producer_id,
            c.producer_epoch,
            commit,
            self._end_txn_version(c),
        )

    def _end_txn_version(self, c: Committable) -> int:
        if c.transaction_version == TRANSACTION_VERSION_KIP890:
            version = self._protocol.api_version(ApiKey.END_TXN)
            if version is None or version < KIP890_END_TXN_VERSION:
                raise ProtocolError(
                    f"{c.transactional_id!r} is a KIP-890 transaction but the broker offers "
                    f"EndTxn up to v{version}",
                    "UNSUPPORTED_VERSION",
                )
            return version
        version = self._protocol.api_version(ApiKey.END_TXN, cap=CLASSIC_END_TXN_MAX_VERSION)
        if version is None:
            raise ProtocolError("the broker does not offer EndTxn", "UNSUPPORTED_VERSION")
        return version

    def _coordinator(self, transactional_id: str) -> int:
        if transactional_id in self._coordinators:
            return self._coordinators[transactional_id]
        code, node = self._protocol.find_transaction_coordinator(transactional_id)
        if code != ErrorCode.NONE:
            if code in _RETRIABLE_COORDINATOR:
                raise ConnectionLostError(f"FindCoordinator: {error_name(code)}")
            raise ProtocolError(
                f"FindCoordinator for {transactional_id!r}: {error_name(code)}", error_name(code)
            )
        self._coordinators[transactional_id] = node
        return node

    def _states(
        self,
        committables: Sequence[Committable],
        since: Mapping[tuple[str, int], int] | None = None,
    ) -> list[TransactionState]:
        states = transaction_states(self._reader, committables, since)
        for c, state in zip(committables, states, strict=True):
            if state.contradictory:
                raise ProtocolError(
                    f"log of {c.transactional_id!r} holds both commit and abort markers: "
                    "the committable's offsets do not describe one transaction",
                    "CORRUPT_COMMITTABLE",
                )
        return states

    def _await_markers(self, c: Committable, commit: bool, deadline: float) -> Outcome | None:
        """Poll the log until every partition carries the marker or the deadline passes."""
        attempt = 0
        while True:
            state = self._states([c])[0]
            if None not in state.markers:
                return self._from_markers(state, commit, sent=False)
            if self._clock() >= deadline:
                return None
            attempt += 1
            self._sleep(self._policy.backoff(attempt))

    @staticmethod
    def _from_markers(state: TransactionState, commit: bool, sent: bool) -> Outcome | None:
        if state.committed:
            return (
                (Outcome.COMMITTED if sent else Outcome.ALREADY_COMMITTED)
                if commit
                else Outcome.ALREADY_COMMITTED
            )
        if state.aborted:
            if commit:
                return Outcome.LOST
            return Outcome.ABORTED if sent else Outcome.ALREADY_ABORTED
        return None  # markers still being written

    # -- fencing ------------------------------------------------------------

    def fence(self, transactional_id: str, transaction_timeout_ms: int = 60_000) -> FenceResult:
        """Re-initialise ``transactional_id``: whatever it left open is aborted.

        Used where the producer id/epoch of a dangling transaction are unknown.
        """
        validate_transactional_id(transactional_id)
        deadline = self._clock() + self._policy.deadline_s
        attempt = 0
        while True:
            attempt += 1
            try:
                node = self._coordinator(transactional_id)
                answer = self._protocol.init_producer_id(
                    node, transactional_id, transaction_timeout_ms
                )
                code = answer.error
            except ConnectionLostError:
                self._coordinators.pop(transactional_id, None)
                code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            if code == ErrorCode.NONE:
                log.info(
                    "fenced %s: now pid %s epoch %s",
                    transactional_id,
                    answer.producer_id,
                    answer.producer_epoch,
                )
                return FenceResult(transactional_id, answer.producer_id, answer.producer_epoch)
            if code not in _RETRIABLE_COORDINATOR:
                raise ProtocolError(
                    f"InitProducerId for {transactional_id!r}: {error_name(code)}",
                    error_name(code),
                )
            if code != ErrorCode.CONCURRENT_TRANSACTIONS:
                self._coordinators.pop(transactional_id, None)
            if self._clock() >= deadline:
                raise TransactionInDoubtError(
                    f"fencing {transactional_id!r} unresolved after {attempt} attempts "
                    f"({error_name(code)}); retry later"
                )
            self._sleep(self._policy.backoff(attempt))
