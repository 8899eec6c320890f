"""The control plane: finish prepared transactions from any process, and say how they ended.

A commit is "act, verify": send EndTxn with the stored producer id and epoch at the
request version the writer's client used, then read the partitions' markers. Every
EndTxn answer maps to exactly one action in :data:`END_TXN_ACTIONS`; "fenced" and
"invalid state" never count as committed: the log decides, and so does it for a
success answer (a broker may answer NONE and do nothing).

A little over 500 lines, on purpose: the outcomes, the EndTxn table and the one class that
acts on them read together, the table beside the code that follows it; the wire is below
(:mod:`..protocol`), the log's reading apart (:mod:`.log`).
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from .. import defaults
from ..errors import (
    BrokerMovedError,
    ConnectionLostError,
    FailoverTimeoutError,
    Kafka2pcError,
    ProtocolError,
    TransactionInDoubtError,
)
from ..naming import validate_transactional_id
from ..protocol.codes import COORDINATOR_MOVED, ErrorCode, error_name
from ..protocol.failover import Failover, RetryPolicy
from ..protocol.producer import EndTxnCall
from ..protocol.records import ControlType
from ..protocol.seam import TransactionProtocol
from ..protocol.versions import ApiKey
from .committable import TRANSACTION_VERSION_KIP890, Committable
from .log import LogReader, MarkerView, marker_views

log = logging.getLogger(__name__)

#: :meth:`TransactionController._end`'s first EndTxn is still to be sent.
_UNSENT: Final = object()

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

    @classmethod
    def ended_by(cls, result: ControlType) -> Outcome:
        """What ending a transaction by ``result`` ourselves makes of it."""
        return cls.COMMITTED if result is ControlType.COMMIT else cls.ABORTED

    @classmethod
    def sought(cls, result: ControlType) -> frozenset[Outcome]:
        """The outcomes that mean ``result`` holds (by us or by someone before us)."""
        if result is ControlType.COMMIT:
            return frozenset({cls.COMMITTED, cls.ALREADY_COMMITTED})
        return frozenset({cls.ABORTED, cls.ALREADY_ABORTED})


class EndTxnAction(enum.Enum):
    VERIFY = "verify"  # the broker accepted; confirm from the markers
    REFIND_COORDINATOR = "refind"  # the coordinator moved or is loading
    RETRY = "retry"  # the same request later
    RESOLVE_FROM_LOG = "resolve"  # ambiguous for our purpose: the markers decide
    FATAL = "fatal"  # a known failure no retry can mend


END_TXN_ACTIONS: dict[int, EndTxnAction] = {
    ErrorCode.NONE: EndTxnAction.VERIFY,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: EndTxnAction.REFIND_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: EndTxnAction.REFIND_COORDINATOR,
    ErrorCode.NOT_COORDINATOR: EndTxnAction.REFIND_COORDINATOR,
    ErrorCode.CONCURRENT_TRANSACTIONS: EndTxnAction.RETRY,
    ErrorCode.REQUEST_TIMED_OUT: EndTxnAction.RETRY,
    ErrorCode.PRODUCER_FENCED: EndTxnAction.RESOLVE_FROM_LOG,
    ErrorCode.INVALID_PRODUCER_EPOCH: EndTxnAction.RESOLVE_FROM_LOG,
    ErrorCode.INVALID_TXN_STATE: EndTxnAction.RESOLVE_FROM_LOG,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: EndTxnAction.RESOLVE_FROM_LOG,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: EndTxnAction.FATAL,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: EndTxnAction.FATAL,
}
"""EndTxn answer -> action. Anything not listed is an unknown failure: FATAL."""

#: Answers after which the coordinator can never commit this producer epoch.
_TERMINAL_FOR_EPOCH = {
    ErrorCode.PRODUCER_FENCED,
    ErrorCode.INVALID_PRODUCER_EPOCH,
}
_RETRIABLE_COORDINATOR = {*COORDINATOR_MOVED, ErrorCode.CONCURRENT_TRANSACTIONS}


def classify_end_txn(code: int) -> EndTxnAction:
    return END_TXN_ACTIONS.get(code, EndTxnAction.FATAL)


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
class FenceResult:
    transactional_id: str
    producer_id: int
    producer_epoch: int


class TransactionController:
    """Commits, aborts and fences transactions through a :class:`TransactionProtocol`.

    Every broker call rides a failover (:class:`~.failover.Failover`) within the
    operation's deadline: a dead coordinator or partition leader is looked up again from
    the surviving nodes until ``policy.deadline_s`` has passed.

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
        self._failover = Failover(self._policy, clock, sleep)
        self._reader = LogReader(protocol, self._failover)
        self._coordinators: dict[str, int] = {}

    @property
    def protocol(self) -> TransactionProtocol:
        """The broker connection it acts through, for checks made beside it."""
        return self._protocol

    def commit(self, committable: Committable) -> Resolution:
        return self.finish_all([committable], ControlType.COMMIT)[0]

    def abort(self, committable: Committable) -> Resolution:
        return self.finish_all([committable], ControlType.ABORT)[0]

    def commit_all(self, committables: Sequence[Committable]) -> list[Resolution]:
        """Commit every committable; the log is read once per partition and phase."""
        return self.finish_all(committables, ControlType.COMMIT)

    def abort_all(self, committables: Sequence[Committable]) -> list[Resolution]:
        return self.finish_all(committables, ControlType.ABORT)

    # -- finishing ----------------------------------------------------------

    def finish_all(
        self, committables: Sequence[Committable], result: ControlType
    ) -> list[Resolution]:
        """End every transaction by ``result``, then verify each from the log's markers.

        The log is not scanned before acting: EndTxn on a finished transaction is
        harmless (an idempotent success or an error we resolve from the log), while
        reading a large run's data back twice is not. The verification reads only
        what was appended after the ends noted first, where fresh markers land; a
        transaction with no marker there is looked up over its whole range once, which
        finds markers that were already in the log (``ALREADY_*``).
        """
        run = _Finishing(committables, result)
        for i, c in enumerate(committables):
            if c.is_empty:
                reason = "no records were written, no transaction was opened"
                run.resolve(i, Outcome.ended_by(result), reason, 0)
        todo = run.pending()
        deadline = self._clock() + self._policy.deadline_s
        self._find_coordinators([committables[i].transactional_id for i in todo])
        try:
            ends = self._reader.log_ends(
                (p for i in todo for p in committables[i].partitions), deadline=deadline
            )
        except FailoverTimeoutError as exc:
            raise FailoverTimeoutError(
                f"{run.verb} of {run.ids(todo)} not begun, nothing changed: {exc}"
            ) from exc
        try:
            accepted = self._send_end_txns(run, todo, deadline)
            self._verify_from_markers(run, accepted, ends, deadline)
        except FailoverTimeoutError as exc:
            raise TransactionInDoubtError(
                f"{run.verb} of {run.ids(run.pending())} unresolved: {exc}; the transactions "
                "may still be open; retry later"
            ) from exc
        return run.resolutions()

    def _send_end_txns(
        self, run: _Finishing, todo: Sequence[int], deadline: float
    ) -> dict[int, int]:
        """EndTxn to each transaction; returns index -> attempts of those answered NONE.

        The first EndTxn of every id whose coordinator is known goes out at once, per
        coordinator, rather than one round trip each (measured: a small gain, see
        docs/performance.md); whatever an answer then asks for (a retry, the log, another
        coordinator) is done id by id, by :meth:`_end`, as for an id sent alone.
        """
        accepted: dict[int, int] = {}
        answered = self._end_txns_at_once(run, todo)
        for i in todo:
            outcome, reason, attempts = self._end(
                run.committables[i], run.result, deadline, answered.get(i, _UNSENT)
            )
            if outcome is None:
                accepted[i] = attempts
            else:
                run.resolve(i, outcome, reason, attempts)
        return accepted

    def _verify_from_markers(
        self,
        run: _Finishing,
        accepted: dict[int, int],
        ends: Mapping[tuple[str, int], int],
        deadline: float,
    ) -> None:
        """Markers follow the coordinator's answer, partition by partition: wait for them."""
        attempt = 0
        looked_back = False
        while accepted:
            unmarked = self._resolve_fresh(run, accepted, ends, deadline)
            if unmarked and not looked_back:
                looked_back = True
                self._look_back(run, accepted, unmarked, ends, deadline)
            if not accepted:
                return
            if self._clock() >= deadline:
                ids = [run.committables[i].transactional_id for i in accepted]
                raise TransactionInDoubtError(
                    f"{run.verb} of {ids} accepted by the coordinator but no markers in the "
                    "log by the deadline; the transactions may still be open; retry later"
                )
            attempt += 1
            self._sleep(self._policy.backoff(attempt))

    def _resolve_fresh(
        self,
        run: _Finishing,
        accepted: dict[int, int],
        ends: Mapping[tuple[str, int], int],
        deadline: float,
    ) -> list[int]:
        """Resolve what has a marker after the ends noted first; returns the indexes with
        no fresh marker at all (perhaps finished before)."""
        waiting = list(accepted)
        fresh = self._markers([run.committables[i] for i in waiting], deadline, since=ends)
        unmarked = []
        for i, view in zip(waiting, fresh, strict=True):
            if None not in view.markers:
                outcome = _outcome(view, run.result, sent=True)
                if outcome is not None:
                    run.resolve(i, outcome, "EndTxn answered NONE", accepted.pop(i))
            elif view.open:
                unmarked.append(i)
        return unmarked

    def _look_back(
        self,
        run: _Finishing,
        accepted: dict[int, int],
        unmarked: Sequence[int],
        ends: Mapping[tuple[str, int], int],
        deadline: float,
    ) -> None:
        """Look for ``unmarked``'s markers over their whole ranges, once.

        Apache Kafka writes markers after answering EndTxn: ours may have landed between
        the two reads, so what the look-back finds is only "already" if it still lies
        before the ends noted first.
        """
        whole = dict(
            zip(
                unmarked,
                self._markers([run.committables[i] for i in unmarked], deadline),
                strict=True,
            )
        )
        found = [i for i, view in whole.items() if None not in view.markers]
        late = self._markers([run.committables[i] for i in found], deadline, since=ends)
        for i, fresh_now in zip(found, late, strict=True):
            if None not in fresh_now.markers:
                outcome = _outcome(fresh_now, run.result, sent=True)
                reason = "EndTxn answered NONE"
            else:
                outcome = _outcome(whole[i], run.result, sent=False)
                reason = "EndTxn answered NONE; markers were already in the log"
            if outcome is not None:
                run.resolve(i, outcome, reason, accepted.pop(i))

    def _end_txns_at_once(
        self, run: _Finishing, todo: Sequence[int]
    ) -> dict[int, int | ConnectionLostError]:
        """Index -> the first EndTxn's answer, for the ids whose coordinator is known, sent
        together, to every coordinator at once, where the protocol offers it (the scripted
        ones of the unit tests need not)."""
        send_many = getattr(self._protocol, "end_txns", None)
        if send_many is None or len(todo) < 2:
            return {}
        by_node: dict[int, list[int]] = {}
        for i in todo:
            node = self._coordinators.get(run.committables[i].transactional_id)
            if node is not None:
                by_node.setdefault(node, []).append(i)
        answers = send_many(
            {
                node: [self._end_txn_call(run.committables[i], run.result) for i in indexes]
                for node, indexes in by_node.items()
            }
        )
        answered: dict[int, int | ConnectionLostError] = {}
        for node, indexes in by_node.items():
            answered.update(zip(indexes, answers[node], strict=True))
        return answered

    def _end(
        self,
        c: Committable,
        result: ControlType,
        deadline: float,
        answered: int | ConnectionLostError | object = _UNSENT,
    ) -> tuple[Outcome | None, str, int]:
        """Send EndTxn until an answer settles it; ``answered``: the first EndTxn's answer
        when it was sent with others (:meth:`_end_txns_at_once`), else :data:`_UNSENT`.

        Returns (outcome, or None when accepted and to be verified; reason; attempts).
        """
        attempt = 0
        last = "no answer"
        while True:
            attempt += 1
            first, answered = answered, _UNSENT
            try:
                code: int | None = (
                    self._end_txn(c, result, deadline) if first is _UNSENT else _answer(first)
                )
            except FailoverTimeoutError as exc:  # no coordinator found by the deadline
                code, last = None, str(exc)
            except ConnectionLostError as exc:
                # The coordinator died, or (some brokers) dropped the connection instead
                # of answering a stale epoch; the markers tell whether the transaction
                # ended meanwhile, and the next attempt finds the coordinator again.
                code, last = None, str(exc)
                self._coordinators.pop(c.transactional_id, None)
            if code is None:
                view = self._markers([c], deadline)[0]
                outcome = None if view.open else _outcome(view, result, sent=False)
                if outcome is not None:
                    return outcome, f"markers in the log after {last}", attempt
            else:
                last = error_name(code)
                action = classify_end_txn(code)
                if action is EndTxnAction.FATAL:
                    raise ProtocolError(f"EndTxn for {c.transactional_id!r} failed: {last}", last)
                if action is EndTxnAction.VERIFY:
                    return None, f"EndTxn answered {last}", attempt
                if action is EndTxnAction.REFIND_COORDINATOR:
                    self._coordinators.pop(c.transactional_id, None)
                if action is EndTxnAction.RESOLVE_FROM_LOG:
                    grace = min(deadline, self._clock() + self._policy.marker_grace_s)
                    outcome = self._await_markers(c, result, grace, deadline)
                    if outcome is not None:
                        return outcome, f"EndTxn answered {last}", attempt
                    if code in _TERMINAL_FOR_EPOCH:
                        # This epoch can never be committed by anyone; no marker yet
                        # means the coordinator's abort is still being written.
                        lost = (
                            Outcome.LOST
                            if result is ControlType.COMMIT
                            else Outcome.ALREADY_ABORTED
                        )
                        return lost, f"EndTxn answered {last}, no marker yet", attempt
                    if code == ErrorCode.INVALID_PRODUCER_ID_MAPPING:
                        raise _unknown_to_coordinator(c)
            if self._clock() >= deadline:
                raise TransactionInDoubtError(
                    f"{result.name.lower()} of {c.transactional_id!r} unresolved "
                    f"after {attempt} attempts ({last}); the transaction may still be open; "
                    "retry later"
                )
            self._sleep(self._policy.backoff(attempt))

    def _end_txn(self, c: Committable, result: ControlType, deadline: float) -> int:
        node = self._coordinator(c.transactional_id, deadline)
        return self._protocol.end_txn(node, *self._end_txn_call(c, result))

    def _end_txn_call(self, c: Committable, result: ControlType) -> EndTxnCall:
        return EndTxnCall(
            c.transactional_id,
            c.producer_id,
            c.producer_epoch,
            result,
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

    def _find_coordinators(self, transactional_ids: Sequence[str]) -> None:
        """Learn many ids' coordinators in one request before their EndTxns: one
        FindCoordinator per id was half of a thousand participants' commit.

        Best effort, where the protocol offers it (the scripted ones of the unit tests do
        not): an id left out (an error answer, no answer at all) is found on its own by
        :meth:`_coordinator`, through the failover, as before.
        """
        wanted = [t for t in dict.fromkeys(transactional_ids) if t not in self._coordinators]
        find_many = getattr(self._protocol, "find_transaction_coordinators", None)
        if len(wanted) < 2 or find_many is None:
            return
        try:
            found = find_many(wanted)
        except Kafka2pcError as exc:
            log.info("FindCoordinator of %d ids at once failed (%s); one by one", len(wanted), exc)
            return
        asked = set(wanted)
        for tid, (code, node) in found.items():
            if code == ErrorCode.NONE and tid in asked:
                self._coordinators[tid] = node

    def _coordinator(self, transactional_id: str, deadline: float) -> int:
        """The id's transaction coordinator, found again through a failover when not known.

        FindCoordinator goes to any live node; while the coordinator's node is dying or
        its successor loads the state, the answer is COORDINATOR_NOT_AVAILABLE and kin.
        """
        if transactional_id in self._coordinators:
            return self._coordinators[transactional_id]

        def find() -> int:
            code, node = self._protocol.find_transaction_coordinator(transactional_id)
            if code in COORDINATOR_MOVED:
                raise BrokerMovedError(f"FindCoordinator: {error_name(code)}", error_name(code))
            if code != ErrorCode.NONE:
                raise ProtocolError(
                    f"FindCoordinator for {transactional_id!r}: {error_name(code)}",
                    error_name(code),
                )
            return node

        node = self._failover.run(
            f"FindCoordinator for {transactional_id!r}", find, deadline=deadline
        )
        self._coordinators[transactional_id] = node
        return node

    def _markers(
        self,
        committables: Sequence[Committable],
        deadline: float,
        since: Mapping[tuple[str, int], int] | None = None,
    ) -> list[MarkerView]:
        views = marker_views(self._reader, committables, since, deadline=deadline)
        for c, view in zip(committables, views, strict=True):
            if view.contradictory:
                raise ProtocolError(
                    f"log of {c.transactional_id!r} holds both commit and abort markers: "
                    "the committable's offsets do not describe one transaction",
                    "CORRUPT_COMMITTABLE",
                )
        return views

    def _await_markers(
        self, c: Committable, result: ControlType, grace: float, deadline: float
    ) -> Outcome | None:
        """Poll the log until every partition carries the marker or ``grace`` passes
        (reads themselves ride a failover until ``deadline``)."""
        attempt = 0
        while True:
            view = self._markers([c], deadline)[0]
            if None not in view.markers:
                return _outcome(view, result, sent=False)
            if self._clock() >= grace:
                return None
            attempt += 1
            self._sleep(self._policy.backoff(attempt))

    # -- fencing ------------------------------------------------------------

    def fence(
        self, transactional_id: str, transaction_timeout_ms: int = defaults.FENCE_TIMEOUT_MS
    ) -> FenceResult:
        """Re-initialise ``transactional_id``: whatever it left open is aborted.

        Used where the producer id/epoch of a dangling transaction are unknown.
        """
        validate_transactional_id(transactional_id)
        deadline = self._clock() + self._policy.deadline_s
        attempt = 0
        while True:
            attempt += 1
            try:
                node = self._coordinator(transactional_id, deadline)
                answer = self._protocol.init_producer_id(
                    node, transactional_id, transaction_timeout_ms
                )
                code = answer.error
            except FailoverTimeoutError as exc:
                raise TransactionInDoubtError(
                    f"fencing {transactional_id!r} unresolved: {exc}; retry later"
                ) from exc
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


def _answer(answered: object) -> int:
    """An answer of EndTxns sent together: the error code, or the lost connection raised."""
    if isinstance(answered, ConnectionLostError):
        raise answered
    assert isinstance(answered, int)
    return answered


def _outcome(view: MarkerView, result: ControlType, sent: bool) -> Outcome | None:
    """What the log's markers make of a transaction we ended by ``result`` (``sent``: our
    EndTxn wrote them) or found ended; None while markers are still being written."""
    if view.committed:
        return (
            Outcome.COMMITTED
            if sent and result is ControlType.COMMIT
            else (Outcome.ALREADY_COMMITTED)
        )
    if view.aborted:
        if result is ControlType.COMMIT:
            return Outcome.LOST
        return Outcome.ABORTED if sent else Outcome.ALREADY_ABORTED
    return None


class _Finishing:
    """One :meth:`TransactionController.finish_all` call: what it ends, how, and the
    outcomes so far (each logged once)."""

    def __init__(self, committables: Sequence[Committable], result: ControlType) -> None:
        self.committables = committables
        self.result = result
        self.verb = result.name.lower()
        self._resolutions: list[Resolution | None] = [None] * len(committables)

    def resolve(self, index: int, outcome: Outcome, reason: str, attempts: int) -> None:
        c = self.committables[index]
        log.info(
            "%s %s (pid %s, epoch %s): %s, %s",
            self.verb,
            c.transactional_id,
            c.producer_id,
            c.producer_epoch,
            outcome.value,
            reason,
        )
        self._resolutions[index] = Resolution(
            outcome,
            c.transactional_id,
            c.producer_id,
            c.producer_epoch,
            c.record_count,
            reason,
            attempts,
        )

    def pending(self) -> list[int]:
        return [i for i, r in enumerate(self._resolutions) if r is None]

    def ids(self, indexes: Sequence[int]) -> list[str]:
        return [self.committables[i].transactional_id for i in indexes]

    def resolutions(self) -> list[Resolution]:
        return [r for r in self._resolutions if r is not None]
