"""Requests sent together: every node at once, at most a window per connection, in order.

Why: the commit sends the first EndTxn of every participant without waiting for each
answer; kafka-python fails a send beyond the connection's in-flight limit rather than
queueing it, and a cluster's coordinators should work at the same time, not one after
another. A scripted network client (no broker) records what is on the wire when.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as kafka_errors

from airflow_provider_kafka2pc.errors import ConnectionLostError
from airflow_provider_kafka2pc.protocol.transport import Transport


class Future:
    def __init__(self) -> None:
        self.is_done = False
        self.value: Any = None
        self.exception: BaseException | None = None

    def succeeded(self) -> bool:
        return self.is_done and self.exception is None

    def failed(self) -> bool:
        return self.is_done and self.exception is not None


class ScriptedClient:
    """Answers each node's requests in the order sent, one per poll per node (as a broker
    answers a connection); ``down``: nodes that cannot be reached; ``silent``: nodes that
    never answer."""

    def __init__(self, down: set[int] = frozenset(), silent: set[int] = frozenset()) -> None:
        self.down, self.silent = down, silent
        self.in_flight: dict[int, list[tuple[Any, Future]]] = {}
        self.most_in_flight: dict[int, int] = {}
        self.nodes_in_flight_together = 0
        self.cluster = type("Cluster", (), {"broker_metadata": staticmethod(lambda n: None)})()

    def await_ready(self, node: int, timeout_ms: int) -> None:
        if node in self.down:
            raise kafka_errors.KafkaConnectionError(f"node {node}")

    def send(self, node: int, request: Any) -> Future:
        future = Future()
        queue = self.in_flight.setdefault(node, [])
        queue.append((request, future))
        self.most_in_flight[node] = max(self.most_in_flight.get(node, 0), len(queue))
        busy = sum(1 for q in self.in_flight.values() if q)
        self.nodes_in_flight_together = max(self.nodes_in_flight_together, busy)
        return future

    def poll(self, timeout_ms: int, future: Future | None = None) -> None:
        for node, queue in self.in_flight.items():
            if queue and node not in self.silent:
                request, answered = queue.pop(0)
                answered.value, answered.is_done = f"answer to {request}", True


def transport(client: ScriptedClient, in_flight: int = 5, timeout_ms: int = 200) -> Transport:
    t = Transport.__new__(Transport)  # no connection: the scripted client stands in
    t._timeout_ms, t._in_flight, t.client = timeout_ms, in_flight, client
    return t


def test_every_node_at_once_within_the_window_answers_in_order():
    client = ScriptedClient()
    batches = {1: [f"a{i}" for i in range(10)], 2: [f"b{i}" for i in range(7)]}
    answers = transport(client).send_all(batches)
    assert answers == {
        1: [f"answer to a{i}" for i in range(10)],
        2: [f"answer to b{i}" for i in range(7)],
    }
    assert client.most_in_flight == {1: 4, 2: 4}  # the in-flight limit (5) less one
    assert client.nodes_in_flight_together == 2


def test_a_node_down_answers_lost_and_the_others_are_sent():
    client = ScriptedClient(down={2})
    answers = transport(client).send_all({1: ["a0", "a1"], 2: ["b0", "b1"]})
    assert answers[1] == ["answer to a0", "answer to a1"]
    assert [type(a) for a in answers[2]] == [ConnectionLostError] * 2
    assert "node 2" in str(answers[2][0])


def test_a_node_that_never_answers_is_lost_at_the_deadline_sent_or_not():
    client = ScriptedClient(silent={2})
    answers = transport(client, in_flight=3, timeout_ms=50).send_all(
        {1: ["a0"], 2: ["b0", "b1", "b2", "b3"]}
    )
    assert answers[1] == ["answer to a0"]
    assert [type(a) for a in answers[2]] == [ConnectionLostError] * 4  # 2 sent, 2 never
    assert all("KafkaTimeoutError" in str(a) for a in answers[2])
