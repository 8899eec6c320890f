"""Failovers on the real three-node cluster (issue 19), each ending with both witnesses.

- The transaction coordinator of the prepared ids is killed -9 after the prepare; the
  commit (``commit_all`` and ``kafka2pc commit``) finishes on the new coordinator.
- The coordinator is killed in the middle of ``commit_all``, right after its first EndTxn
  was answered; the rest finishes on the new coordinator.

The victim is chosen so that it coordinates every id of the run and also leads a data
partition: the commit meets a dead coordinator and a dead partition leader at once.
Timings are printed (``-s``) as ``TIMING`` lines.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest

from airflow_provider_kafka2pc import defaults
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.protocol.described import CoordinatorTxnState
from airflow_provider_kafka2pc.protocol.producer import EndTxnCall
from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.controller import (
    Outcome,
    RetryPolicy,
    TransactionController,
)
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from devtools.broker import KafkaCluster
from tests.conftest import assert_exactly_once, cli
from tests.support.java_witness import assert_java_witness

from .conftest import ids_coordinated_by

pytestmark = pytest.mark.cluster

ROWS = 1000
#: The commit's overall deadline; the failover must fit well inside it.
DEADLINE_S = 60.0


def rows(start: int, count: int) -> Iterator[tuple[bytes, bytes]]:
    for i in range(start, start + count):
        yield (f"k{i}".encode(), f'{{"id": {i}, "payload": "{"x" * 80}"}}'.encode())


def prepare(
    settings: dict[str, Any], topic: str, ids: list[str], per_id: int = ROWS
) -> list[Committable]:
    """One open transaction per id, each touching every partition (keys spread by murmur2)."""
    committables = [
        TransactionalWriter(settings, tid, transaction_timeout_ms=120_000).write(
            topic, rows(i * per_id, per_id)
        )
        for i, tid in enumerate(ids)
    ]
    for c in committables:
        assert len(c.partitions) == 3, c
    return committables


def victim_coordinating_a_leader(
    cluster: KafkaCluster, topic: str, count: int
) -> tuple[int, list[str]]:
    """The leader of partition 0, and ``count`` ids it coordinates."""
    victim = cluster.leader(topic, 0)
    return victim, ids_coordinated_by(cluster, victim, count)


def witnesses(
    cluster: KafkaCluster,
    topic: str,
    committables: list[Committable],
    *,
    java: bool = False,
    **expect: Any,
):
    """Both witnesses, asked through every bootstrap server (some may be down); with
    ``java``, Kafka's own console consumer (read_committed) as the third."""
    bootstrap = cluster.bootstrap_servers
    with KafkaProtocol({"bootstrap.servers": bootstrap}, timeout_ms=10_000) as protocol:
        found = assert_exactly_once(protocol, bootstrap, topic, *committables, **expect)
    if java:
        assert_java_witness(bootstrap, topic, committed=expect["committed"])
    return found


def test_coordinator_killed_after_prepare_then_commit_all_finishes_on_the_new_one(
    kafka_cluster, cluster_settings, cluster_topic
):
    victim, ids = victim_coordinating_a_leader(kafka_cluster, cluster_topic, 3)
    committables = prepare(cluster_settings, cluster_topic, ids)

    kafka_cluster.kill(victim)
    killed = time.monotonic()
    with KafkaProtocol(cluster_settings, timeout_ms=5_000) as protocol:
        # DescribeTransactions rides the failover too: the new coordinators loaded the
        # prepared transactions, still open under the writers' producer ids and epochs.
        described = protocol.describe_transactions(ids)
        describe_s = time.monotonic() - killed
        controller = TransactionController(protocol, RetryPolicy(deadline_s=DEADLINE_S))
        results = controller.commit_all(committables)
    commit_s = time.monotonic() - killed
    print(
        f"\nTIMING after coordinator node {victim} was killed: DescribeTransactions answered "
        f"in {describe_s:.1f} s, commit_all done {commit_s:.1f} s after the kill"
    )

    assert {(d.transactional_id, d.state, d.producer_id, d.producer_epoch) for d in described} == {
        (c.transactional_id, CoordinatorTxnState.ONGOING, c.producer_id, c.producer_epoch)
        for c in committables
    }
    assert {d.coordinator for d in described}.isdisjoint({victim})
    assert [r.outcome for r in results] == [Outcome.COMMITTED] * 3, results
    assert commit_s < DEADLINE_S
    assert kafka_cluster.transaction_coordinator(ids[0]) != victim
    # Witnessed while the victim is still down: the audit rides the failover too.
    witnesses(kafka_cluster, cluster_topic, committables, committed=3 * ROWS, aborted=0)
    kafka_cluster.restart(victim)
    witnesses(kafka_cluster, cluster_topic, committables, committed=3 * ROWS, aborted=0, java=True)


def test_coordinator_killed_after_prepare_then_the_commit_command_finishes(
    kafka_cluster, cluster_settings, cluster_topic
):
    victim, ids = victim_coordinating_a_leader(kafka_cluster, cluster_topic, 3)
    committables = prepare(cluster_settings, cluster_topic, ids)
    document = json.dumps([c.to_dict() for c in committables])

    kafka_cluster.kill(victim)
    killed = time.monotonic()
    done = cli(
        "commit",
        "-b",
        kafka_cluster.bootstrap_servers,
        "--timeout-ms",
        "5000",
        "--deadline-s",
        str(DEADLINE_S),
        "-",
        stdin=document,
    )
    commit_s = time.monotonic() - killed
    print(f"\nTIMING kafka2pc commit after coordinator node {victim} killed: {commit_s:.1f} s")

    assert done.returncode == 0, (done.stdout, done.stderr[-3000:])
    outcomes = [r["outcome"] for r in json.loads(done.stdout)["results"]]
    assert outcomes == ["COMMITTED"] * 3, done.stdout
    witnesses(kafka_cluster, cluster_topic, committables, committed=3 * ROWS, aborted=0)
    kafka_cluster.restart(victim)
    witnesses(kafka_cluster, cluster_topic, committables, committed=3 * ROWS, aborted=0, java=True)


class KillAfterFirstEndTxn(KafkaProtocol):
    """The seam: right after the coordinator answers the first EndTxn, ``kill`` runs.

    The kill itself is real (``kill -9`` of the coordinator's JVM); only its moment is
    chosen here, between two EndTxn calls of one ``commit_all``: when the EndTxns are sent
    together (``end_txns``), between the first one's answer and the rest's sending.
    """

    def __init__(self, settings: dict[str, Any], kill: Callable[[], None], **kw: Any) -> None:
        super().__init__(settings, **kw)
        self._kill: Callable[[], None] | None = kill
        self.end_txn_answers: list[tuple[str, int, int]] = []

    def end_txn(self, node: int, transactional_id: str, *args: Any, **kwargs: Any) -> int:
        code = super().end_txn(node, transactional_id, *args, **kwargs)
        self._answered(transactional_id, node, code)
        return code

    def end_txns(self, batches: Mapping[int, Sequence[EndTxnCall]]) -> dict[int, list[Any]]:
        if self._kill is None:
            answers = super().end_txns(batches)
            for node, calls in batches.items():
                self._note(node, calls, answers[node])
            return answers
        node, calls = next(iter(batches.items()))
        first = super().end_txns({node: calls[:1]})[node]
        self._answered(calls[0].transactional_id, node, first[0])
        rest_batches = {**batches, node: calls[1:]}
        rest = super().end_txns({n: c for n, c in rest_batches.items() if c})
        for n, c in rest_batches.items():
            self._note(n, c, rest.get(n, []))
        return {n: (first + rest.get(n, []) if n == node else rest[n]) for n in batches}

    def _note(self, node: int, calls: Sequence[EndTxnCall], answers: Sequence[Any]) -> None:
        for call, answer in zip(calls, answers, strict=True):
            if isinstance(answer, int):
                self.end_txn_answers.append((call.transactional_id, node, answer))

    def _answered(self, transactional_id: str, node: int, code: Any) -> None:
        if isinstance(code, int):
            self.end_txn_answers.append((transactional_id, node, code))
        if self._kill is not None:
            kill, self._kill = self._kill, None
            kill()


def test_coordinator_killed_in_the_middle_of_commit_all(
    kafka_cluster, cluster_settings, cluster_topic
):
    victim, ids = victim_coordinating_a_leader(kafka_cluster, cluster_topic, 3)
    committables = prepare(cluster_settings, cluster_topic, ids)
    killed: list[float] = []

    def kill() -> None:
        kafka_cluster.kill(victim)
        killed.append(time.monotonic())

    with KillAfterFirstEndTxn(cluster_settings, kill, timeout_ms=5_000) as protocol:
        controller = TransactionController(protocol, RetryPolicy(deadline_s=DEADLINE_S))
        results = controller.commit_all(committables)
        answers = protocol.end_txn_answers
    commit_s = time.monotonic() - killed[0]
    print(
        f"\nTIMING commit_all finished {commit_s:.1f} s after coordinator node {victim} "
        f"was killed mid-commit; EndTxn answers {answers}"
    )

    assert killed, "the coordinator was never killed"
    assert answers[0][1:] == (victim, 0), answers  # the first EndTxn went to the victim
    assert {tid for tid, node, code in answers if node != victim and code == 0} >= set(ids[1:])
    assert [r.outcome for r in results] == [Outcome.COMMITTED] * 3, results
    witnesses(kafka_cluster, cluster_topic, committables, committed=3 * ROWS, aborted=0)
    kafka_cluster.restart(victim)
    witnesses(kafka_cluster, cluster_topic, committables, committed=3 * ROWS, aborted=0, java=True)


def test_a_node_just_killed_is_routed_around_by_requests_any_node_answers(
    kafka_cluster, cluster_topic, caplog
):
    """Until the controller fences a node killed -9 (``broker.session.timeout.ms``), the
    survivors' metadata still lists it, and a client picks it for Metadata or
    FindCoordinator one time in three. The prepare's topic check failed that way in a
    rolling restart (CI, 2026-11-26); such a request now goes on to another node.

    Fresh connections, bootstrapped from the survivors, ask in a loop inside that window;
    every answer must come, and at least one must have been routed around the victim.
    """
    victim = kafka_cluster.leader(cluster_topic, 0)
    survivors = ",".join(
        f"127.0.0.1:{kafka_cluster.client_port(n)}" for n in kafka_cluster.node_ids if n != victim
    )
    caplog.set_level("INFO", logger="airflow_provider_kafka2pc.protocol.transport")
    kafka_cluster.kill(victim)
    killed = time.monotonic()
    counts: list[int] = []
    coordinators: set[int] = set()
    listed = 0
    while time.monotonic() - killed < 2.0 and "asking another node" not in caplog.text:
        with KafkaProtocol({"bootstrap.servers": survivors}, timeout_ms=5_000) as protocol:
            listed += victim in {b.node_id for b in protocol._client.cluster.brokers()}
            counts.append(len(protocol.partition_leaders(cluster_topic)))
            error, node = protocol.find_transaction_coordinator(f"routed-{len(counts)}")
            if not error:
                coordinators.add(node)
    print(f"\n{len(counts)} metadata answers in the victim's window ({listed} still listed it)")
    kafka_cluster.restart(victim)

    assert counts and set(counts) == {3}, counts
    assert listed, "the victim was never listed: the window this test needs was missed"
    assert "asking another node" in caplog.text, (counts, caplog.text[-2000:])


def test_a_paused_node_costs_one_attempt_bound_not_a_request_timeout(
    kafka_cluster, cluster_topic, cluster_settings, caplog
):
    """A node SIGSTOPped keeps its connections open and never answers. A request any node
    can answer gives it at most ``ANY_NODE_ATTEMPT_MS`` while other nodes are left, then
    asks another: the answers come within one request timeout (60 s here), not after it."""
    caplog.set_level("INFO", logger="airflow_provider_kafka2pc.protocol.transport")
    with KafkaProtocol(cluster_settings, timeout_ms=60_000) as protocol:
        assert len(protocol.partition_leaders(cluster_topic)) == 3
        victim = protocol._client.least_loaded_node()  # the connected node asked next
        pid = kafka_cluster.node(int(victim)).pid
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            leaders = protocol.partition_leaders(cluster_topic)
            protocol.find_transaction_coordinator(f"paused-{uuid.uuid4().hex[:8]}")
            elapsed = time.monotonic() - started
        finally:
            os.kill(pid, signal.SIGCONT)
    print(f"\nnode {victim} paused: Metadata + FindCoordinator answered in {elapsed:.1f} s")
    assert len(leaders) == 3, leaders
    routed = f"to node {victim} at "
    assert routed in caplog.text and "asking another node" in caplog.text, caplog.text[-2000:]
    assert f"within {defaults.ANY_NODE_ATTEMPT_MS} ms" in caplog.text, caplog.text[-2000:]
    assert elapsed < 60, elapsed  # a whole request timeout on the paused node would be 60 s
