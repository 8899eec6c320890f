"""What Apache Kafka's transaction coordinator really answers to EndTxn, situation by situation.

Each :class:`Scenario` writes fresh transactions, brings them into one situation
(committed, aborted by the coordinator's timeout, fenced, ...) and ends them through
:class:`~..transaction.controller.TransactionController`, recording the raw EndTxn
answers it received at the request version it chose. On brokers with KIP-890 the same
situations are also shown for a bare EndTxn v5 on a librdkafka transaction (what the
controller must not send, for information) and for KIP-890 transactions written at
protocol level, which the controller ends with v5.

``scripts/broker_answers.py`` prints the table (``docs/broker-answers.md``);
``tests/integration/test_broker_answers.py`` replays every row against that document. Not used on
any production path.
"""

from __future__ import annotations

import enum
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from airflow_provider_kafka2pc.errors import ConnectionLostError, Kafka2pcError, ProtocolError
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.protocol.codes import ErrorCode, error_name
from airflow_provider_kafka2pc.protocol.described import DescribedTransaction
from airflow_provider_kafka2pc.protocol.records import ControlType
from airflow_provider_kafka2pc.protocol.versions import KIP890_PRODUCE_VERSION, ApiKey
from airflow_provider_kafka2pc.transaction.committable import (
    TRANSACTION_VERSION_CLASSIC,
    TRANSACTION_VERSION_KIP890,
    Committable,
    PartitionRange,
)
from airflow_provider_kafka2pc.transaction.controller import (
    KIP890_END_TXN_VERSION,
    EndTxnAction,
    Outcome,
    Resolution,
    RetryPolicy,
    TransactionController,
    classify_end_txn,
)
from airflow_provider_kafka2pc.transaction.log import LogReader, marker_views
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter

RECORDS_PER_TRANSACTION = 12
#: Long enough never to expire during a row; the timeout row uses its own.
TRANSACTION_TIMEOUT_MS = 60_000
#: The timeout row's transactions; the broker must check for timed-out transactions
#: often (transaction.abort.timed.out.transaction.cleanup.interval.ms=500 here).
SHORT_TRANSACTION_TIMEOUT_MS = 2_000
#: The controller settings of every row: a short wait for markers after an ambiguous
#: answer keeps the in-doubt row quick; nothing else depends on it.
POLICY = RetryPolicy(deadline_s=30.0, marker_grace_s=2.0)

_SETTLED = frozenset({"CompleteCommit", "CompleteAbort", "Empty"})
_RETRY_COORDINATOR = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.CONCURRENT_TRANSACTIONS,
    }
)


class Flavor(enum.Enum):
    """Which transaction is ended, and how."""

    #: Written by librdkafka (TransactionalWriter, classic = TV1), ended by the controller
    #: with EndTxn <= v4.
    CLASSIC = "classic"
    #: Written by librdkafka, ended by a bare EndTxn v5: what v5 would answer (info only).
    CLASSIC_V5 = "classic, EndTxn v5"
    #: Written at protocol level with Produce v12 (KIP-890 = TV2), ended by the
    #: controller with EndTxn v5.
    KIP890 = "kip890"


# -- the lab: one broker, one topic, the writers ----------------------------


@dataclass
class Lab:
    """Everything a scenario needs: the broker connection, a topic, and its writers."""

    settings: Mapping[str, Any]
    protocol: KafkaProtocol
    topic: str
    policy: RetryPolicy = POLICY

    def controller(self, protocol: Any = None) -> TransactionController:
        return TransactionController(protocol or self.protocol, self.policy)

    def flavors(self) -> list[Flavor]:
        """CLASSIC always; the v5 flavors where the broker offers KIP-890 (4.x)."""
        end_txn = self.protocol.api_version(ApiKey.END_TXN) or 0
        produce = self.protocol.api_version(ApiKey.PRODUCE) or 0
        if end_txn >= KIP890_END_TXN_VERSION and produce >= KIP890_PRODUCE_VERSION:
            return [Flavor.CLASSIC, Flavor.CLASSIC_V5, Flavor.KIP890]
        return [Flavor.CLASSIC]

    def write(self, flavor: Flavor, transaction_timeout_ms: int) -> Committable:
        tid = f"answers-{flavor.name.lower()}-{uuid.uuid4().hex[:10]}"
        rows = [(f"{tid}-{i}".encode(), b"row %d" % i) for i in range(RECORDS_PER_TRANSACTION)]
        if flavor is Flavor.KIP890:
            return write_protocol_transaction(
                self.protocol, tid, self.topic, rows, kip890=True, timeout_ms=transaction_timeout_ms
            )
        writer = TransactionalWriter(
            self.settings, tid, transaction_timeout_ms=transaction_timeout_ms
        )
        return writer.write(self.topic, rows)

    def coordinator_state(self, transactional_id: str) -> DescribedTransaction | None:
        """DescribeTransactions of one id, or None when the coordinator does not know it."""
        return self.protocol.describe_transaction(transactional_id)

    def settle(
        self, committables: Sequence[Committable], timeout_s: float = 30.0
    ) -> dict[str, dict[str, Any]]:
        """Wait until the coordinator has finished every transaction's end (no Prepare*).

        Right after an EndTxn the coordinator is still writing markers and answers
        CONCURRENT_TRANSACTIONS; the table is about the settled situation.
        """
        deadline = time.monotonic() + timeout_s
        states: dict[str, dict[str, Any]] = {}
        for c in committables:
            while True:
                state = self.coordinator_state(c.transactional_id)
                if state is None or state.state in _SETTLED:
                    states[c.transactional_id] = state or {}
                    break
                if time.monotonic() > deadline:
                    raise Kafka2pcError(f"{c.transactional_id}: still {state.state}")
                time.sleep(0.1)
        return states


def coordinator_of(protocol: KafkaProtocol, transactional_id: str, timeout_s: float = 30.0) -> int:
    """FindCoordinator, waiting while a fresh broker is still loading its coordinators."""
    deadline = time.monotonic() + timeout_s
    while True:
        code, node = protocol.find_transaction_coordinator(transactional_id)
        if code == ErrorCode.NONE:
            return node
        if code not in _RETRY_COORDINATOR or time.monotonic() > deadline:
            raise ProtocolError(f"FindCoordinator: {error_name(code)}", error_name(code))
        time.sleep(0.2)


def write_protocol_transaction(
    protocol: KafkaProtocol,
    transactional_id: str,
    topic: str,
    rows: Sequence[tuple[bytes | None, bytes | None]],
    *,
    kip890: bool,
    timeout_ms: int,
    enable_2pc: bool = False,
) -> Committable:
    """Open a transaction and write ``rows`` into it at protocol level; leave it open.

    For what librdkafka cannot write: KIP-890 transactions (Produce v12, the broker adds
    the partitions) and KIP-939 ones (InitProducerId v6 with ``enable_2pc``). Classic
    transactions add their partitions with AddPartitionsToTxn v3 first. Rows go round
    robin over the topic's partitions, one batch per partition.
    """
    deadline = time.monotonic() + 30.0
    while True:
        node = coordinator_of(protocol, transactional_id)
        init = protocol.init_producer_id(node, transactional_id, timeout_ms, enable_2pc=enable_2pc)
        if init.error not in _RETRY_COORDINATOR or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if init.error != ErrorCode.NONE:
        name = error_name(init.error)
        raise ProtocolError(f"InitProducerId for {transactional_id!r}: {name}", name)
    pid, epoch = init.producer_id, init.producer_epoch
    leaders = protocol.partition_leaders(topic)
    partitions = sorted(leaders)
    by_partition: dict[int, list[tuple[bytes | None, bytes | None]]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_partition[partitions[i % len(partitions)]].append(row)
    start_ms = int(time.time() * 1000)
    if not kip890:
        added = protocol.add_partitions_to_txn(
            node, transactional_id, pid, epoch, topic, sorted(by_partition)
        )
        failed = {p: error_name(e) for p, e in added.items() if e != ErrorCode.NONE}
        if failed:
            raise ProtocolError(f"AddPartitionsToTxn for {transactional_id!r}: {failed}")
    ranges = []
    by_leader: dict[int, dict[int, list[tuple[bytes | None, bytes | None]]]] = defaultdict(dict)
    for p, part_rows in by_partition.items():
        by_leader[leaders[p]][p] = part_rows
    for leader, batch in by_leader.items():
        answers = protocol.produce_transactional(
            leader, transactional_id, pid, epoch, topic, batch, kip890=kip890
        )
        for p, answer in sorted(answers.items()):
            if answer.error != ErrorCode.NONE:
                name = error_name(answer.error)
                raise ProtocolError(f"Produce to {topic}-{p} for {transactional_id!r}: {name}")
            n = len(batch[p])
            ranges.append(
                PartitionRange(topic, p, answer.base_offset, answer.base_offset + n - 1, n)
            )
    return Committable(
        transactional_id=transactional_id,
        producer_id=pid,
        producer_epoch=epoch,
        transaction_version=TRANSACTION_VERSION_KIP890 if kip890 else TRANSACTION_VERSION_CLASSIC,
        partitions=tuple(sorted(ranges, key=lambda r: r.partition)),
        record_count=len(rows),
        start_time_ms=start_ms,
        transaction_timeout_ms=timeout_ms,
    )


# -- situations ---------------------------------------------------------------


def _as_is(lab: Lab, committables: list[Committable]) -> list[Committable]:
    return committables


def _committed(lab: Lab, committables: list[Committable]) -> list[Committable]:
    _expect(lab.controller().commit_all(committables), Outcome.COMMITTED)
    lab.settle(committables)
    return committables


def _aborted(lab: Lab, committables: list[Committable]) -> list[Committable]:
    _expect(lab.controller().abort_all(committables), Outcome.ABORTED)
    lab.settle(committables)
    return committables


def _expect(results: Sequence[Resolution], outcome: Outcome) -> None:
    wrong = [r.to_dict() for r in results if r.outcome is not outcome]
    if wrong:
        raise Kafka2pcError(f"setting the situation up: expected {outcome.value}, got {wrong}")


def _fenced(lab: Lab, committables: list[Committable]) -> list[Committable]:
    controller = lab.controller()
    for c in committables:
        controller.fence(c.transactional_id)
    lab.settle(committables)
    return committables


def _timed_out(lab: Lab, committables: list[Committable]) -> list[Committable]:
    """Wait until the coordinator's reaper has aborted every transaction (no EndTxn)."""
    timeout_s = max(c.transaction_timeout_ms for c in committables) / 1000 + 30.0
    deadline = time.monotonic() + timeout_s
    for c in committables:
        while (state := lab.coordinator_state(c.transactional_id)) and state.state != (
            "CompleteAbort"
        ):
            if time.monotonic() > deadline:
                raise Kafka2pcError(f"{c.transactional_id} not aborted by its timeout: {state}")
            time.sleep(0.1)
    return committables


def _unknown_id(lab: Lab, committables: list[Committable]) -> list[Committable]:
    """The same open transactions, named by a transactional id the coordinator never saw."""
    return [
        replace(c, transactional_id=f"never-seen-{uuid.uuid4().hex[:10]}") for c in committables
    ]


@dataclass(frozen=True)
class Scenario:
    """One row: a situation, the request that ends it, and what must come of it."""

    situation: str
    commit: bool
    #: How the row's transactions end (the audit and read_committed check it).
    ends_committed: bool
    #: The controller's expected outcome (an Outcome value) or the error it must raise.
    expected: str
    #: How END_TXN_ACTIONS must classify the (first) EndTxn answer, for every kind of
    #: transaction: a success answer is verified, anything else resolved from the log.
    action: str
    why: str
    prepare: Callable[[Lab, list[Committable]], list[Committable]] = _as_is
    transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS

    @property
    def request(self) -> str:
        return "commit" if self.commit else "abort"

    @property
    def result(self) -> ControlType:
        return ControlType.COMMIT if self.commit else ControlType.ABORT


VERIFY, RESOLVE = EndTxnAction.VERIFY.name, EndTxnAction.RESOLVE_FROM_LOG.name

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "commit",
        commit=True,
        ends_committed=True,
        expected="COMMITTED",
        action=VERIFY,
        why="an open transaction; the commit markers appear",
    ),
    Scenario(
        "repeated commit",
        commit=True,
        ends_committed=True,
        expected="ALREADY_COMMITTED",
        action=VERIFY,
        why="a success answer, but the commit markers were in the log before",
        prepare=_committed,
    ),
    Scenario(
        "commit after timeout abort",
        commit=True,
        ends_committed=False,
        expected="LOST",
        action=RESOLVE,
        why="the coordinator's reaper aborted it; the abort markers decide",
        prepare=_timed_out,
        transaction_timeout_ms=SHORT_TRANSACTION_TIMEOUT_MS,
    ),
    Scenario(
        "commit after fencing",
        commit=True,
        ends_committed=False,
        expected="LOST",
        action=RESOLVE,
        why="a new InitProducerId aborted it; the abort markers decide",
        prepare=_fenced,
    ),
    Scenario(
        "commit after abort",
        commit=True,
        ends_committed=False,
        expected="LOST",
        action=RESOLVE,
        why="an earlier EndTxn aborted it; the abort markers decide",
        prepare=_aborted,
    ),
    Scenario(
        "abort after commit",
        commit=False,
        ends_committed=True,
        expected="ALREADY_COMMITTED",
        action=RESOLVE,
        why="committed before; the commit markers decide, an abort must not pretend success",
        prepare=_committed,
    ),
    Scenario(
        "unknown transactional id",
        commit=True,
        ends_committed=False,
        expected="TransactionInDoubtError",
        action=RESOLVE,
        why="the coordinator does not know the id while the records are open: not LOST "
        "(whoever owns them may still commit them); the row then aborts them by their "
        "real id",
        prepare=_unknown_id,
    ),
)


def scenario(situation: str) -> Scenario:
    return next(s for s in SCENARIOS if s.situation == situation)


# -- running a row --------------------------------------------------------------


#: Noted instead of an error code when the broker dropped the connection.
DROPPED = -999


class EndTxnRecorder:
    """Passes every call to the real protocol and notes each EndTxn answer (version, code)."""

    def __init__(self, protocol: KafkaProtocol) -> None:
        self._protocol = protocol
        self.answers: list[tuple[int, int]] = []

    def end_txn(
        self,
        node: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        result: ControlType,
        version: int,
    ) -> int:
        try:
            code = self._protocol.end_txn(
                node, transactional_id, producer_id, epoch, result, version
            )
        except ConnectionLostError:
            self.answers.append((version, DROPPED))
            raise
        self.answers.append((version, code))
        return code

    def __getattr__(self, name: str) -> Any:
        return getattr(self._protocol, name)


@dataclass(frozen=True)
class Observation:
    """What one flavor of one row saw."""

    flavor: Flavor
    end_txn_version: int
    #: Every EndTxn answer, by name, in order (one for a settled situation).
    answers: tuple[str, ...]
    #: The coordinator's state before the request, the epoch relative to the committable's.
    before: str
    action: str = ""
    outcome: str = ""
    detail: str = ""


@dataclass
class RowResult:
    scenario: Scenario
    observations: dict[Flavor, Observation] = field(default_factory=dict)
    #: The real committables of the row (their own ids), for the audit.
    committables: list[Committable] = field(default_factory=list)

    @property
    def expected_committed(self) -> int:
        return sum(c.record_count for c in self.committables) if self.scenario.ends_committed else 0

    @property
    def expected_aborted(self) -> int:
        return 0 if self.scenario.ends_committed else sum(c.record_count for c in self.committables)


def _before(lab: Lab, real: Committable, sent: Committable) -> str:
    if sent.transactional_id != real.transactional_id:
        return "id unknown"
    state = lab.coordinator_state(real.transactional_id)
    if state is None:
        return "id unknown"
    epoch = state.producer_epoch - real.producer_epoch
    same_pid = "" if state.producer_id == real.producer_id else ", other producer id"
    return f"{state.state}, epoch {'+' if epoch >= 0 else ''}{epoch}{same_pid}"


def run_scenario(lab: Lab, sc: Scenario, flavors: Sequence[Flavor] | None = None) -> RowResult:
    """Write one transaction per flavor, bring all into the situation, end each, clean up.

    Afterwards every transaction of the row is ended (any left open is aborted with its
    real id), so the caller can check the topic with the audit and read_committed.
    """
    flavors = list(flavors or lab.flavors())
    real = [lab.write(f, sc.transaction_timeout_ms) for f in flavors]
    result = RowResult(sc, committables=real)
    sent = sc.prepare(lab, list(real))
    for flavor, real_c, sent_c in zip(flavors, real, sent, strict=True):
        before = _before(lab, real_c, sent_c)
        if flavor is Flavor.CLASSIC_V5:
            node = coordinator_of(lab.protocol, sent_c.transactional_id)
            code = lab.protocol.end_txn(
                node,
                sent_c.transactional_id,
                sent_c.producer_id,
                sent_c.producer_epoch,
                sc.result,
                KIP890_END_TXN_VERSION,
            )
            result.observations[flavor] = Observation(
                flavor, KIP890_END_TXN_VERSION, (error_name(code),), before
            )
            continue
        recorder = EndTxnRecorder(lab.protocol)
        controller = lab.controller(recorder)
        try:
            resolution = controller.finish_all([sent_c], sc.result)[0]
            outcome, detail = resolution.outcome.value, resolution.reason
        except Kafka2pcError as exc:
            outcome, detail = type(exc).__name__, str(exc)
        codes = [code for _, code in recorder.answers]
        result.observations[flavor] = Observation(
            flavor,
            recorder.answers[0][0] if recorder.answers else -1,
            tuple(error_name(c) if c != DROPPED else "connection dropped" for c in codes),
            before,
            classify_end_txn(codes[0]).name if codes else "",
            outcome,
            detail,
        )
    _finish_leftovers(lab, real)
    return result


def _finish_leftovers(lab: Lab, committables: Sequence[Committable]) -> None:
    """Abort, with its real id, whatever a row left open (the unknown-id row does)."""
    states = marker_views(LogReader(lab.protocol), committables)
    still_open = [c for c, s in zip(committables, states, strict=True) if None in s.markers]
    if still_open:
        lab.controller().abort_all(still_open)
    lab.settle(committables)


# -- the document ---------------------------------------------------------------

CLASSIC_HEADING = "### Classic transactions (librdkafka, TV1)"
KIP890_HEADING = "### KIP-890 transactions (written at protocol level, TV2)"
COL_SITUATION = "situation"
COL_REQUEST = "request"
COL_BEFORE = "coordinator before"
COL_ANSWER = "EndTxn answer (controller)"
COL_ACTION = "END_TXN_ACTIONS"
COL_OUTCOME = "controller outcome"
COL_V5 = "bare EndTxn v5 (info)"


def render_version(version: str, rows: Sequence[RowResult]) -> str:
    """The markdown of one broker version: a table per transaction kind."""
    out = [f"## Apache Kafka {version}", ""]
    flavors = list(rows[0].observations) if rows else []
    classic_cols = [COL_SITUATION, COL_REQUEST, COL_BEFORE, COL_ANSWER, COL_ACTION, COL_OUTCOME]
    if Flavor.CLASSIC_V5 in flavors:
        classic_cols.append(COL_V5)
    out += [CLASSIC_HEADING, "", *_table(classic_cols, rows, Flavor.CLASSIC), ""]
    if Flavor.KIP890 in flavors:
        kip890_cols = classic_cols[:6]
        out += [KIP890_HEADING, "", *_table(kip890_cols, rows, Flavor.KIP890), ""]
    return "\n".join(out)


def _table(columns: list[str], rows: Sequence[RowResult], flavor: Flavor) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        obs = row.observations[flavor]
        cells = {
            COL_SITUATION: row.scenario.situation,
            COL_REQUEST: row.scenario.request,
            COL_BEFORE: obs.before,
            COL_ANSWER: answer_cell(obs.end_txn_version, obs.answers),
            COL_ACTION: obs.action,
            COL_OUTCOME: obs.outcome,
        }
        if Flavor.CLASSIC_V5 in row.observations:
            v5 = row.observations[Flavor.CLASSIC_V5]
            cells[COL_V5] = " → ".join(v5.answers)
        lines.append("| " + " | ".join(cells[c] for c in columns) + " |")
    return lines


def read_document(path: Path) -> dict[tuple[str, str], dict[str, dict[str, str]]]:
    """Parse docs/broker-answers.md: (Kafka version, heading) -> situation -> column -> cell."""
    tables: dict[tuple[str, str], dict[str, dict[str, str]]] = {}
    version = heading = ""
    header: list[str] = []
    for line in path.read_text().splitlines():
        if m := re.match(r"## Apache Kafka (\S+)", line):
            version, heading = m.group(1), ""
        elif line.startswith("### "):
            heading, header = line.strip(), []
        elif line.startswith("|") and version and heading:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not header:
                header = cells
            elif not set(line) <= set("|-: "):
                tables.setdefault((version, heading), {})[cells[0]] = dict(
                    zip(header, cells, strict=True)
                )
    return tables


def answer_cell(version: int, answers: Sequence[str]) -> str:
    return f"v{version}: " + " → ".join(answers)
