"""The transport: one kafka-python network client that sends a request to a node, or to
whichever node answers, and turns a lost connection into :class:`ConnectionLostError`.

Apart from the builders and parsers (they never send) and from :mod:`.failover` (which
asks again, elsewhere, until a deadline): this module asks once, but never gives up on
the cluster because one node is down.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import kafka.errors as kafka_errors
from kafka.net.compat import KafkaNetClient

from .. import defaults
from ..errors import BrokerUnreachableError, ConfigurationError, ConnectionLostError
from .login import sasl_refusal

log = logging.getLogger(__name__)

#: What kafka-python raises (or fails a request's future with) when a node is gone; a node
#: the cluster's metadata no longer lists (a coordinator killed a moment ago) is gone too.
_LOST = (
    kafka_errors.UnknownBrokerIdError,
    kafka_errors.KafkaConnectionError,
    kafka_errors.KafkaTimeoutError,
    kafka_errors.NodeNotReadyError,
    kafka_errors.RequestTimedOutError,
    kafka_errors.Cancelled,
    ConnectionError,
)


class Transport:
    """Connected on construction; a refused SASL login or no broker at all raise here.

    :param kp_config: kafka-python settings (see :func:`..connection.settings.to_kafka_python`).
    :param servers: the bootstrap servers, for error texts.
    :param user: the SASL user name, for error texts (never the password).
    :param timeout_ms: bound on connecting and on each request.
    """

    def __init__(
        self, kp_config: Mapping[str, Any], *, servers: str, user: object, timeout_ms: int
    ) -> None:
        self._timeout_ms = timeout_ms
        self._in_flight = int(kp_config.get("max_in_flight_requests_per_connection", 5))
        self.client = KafkaNetClient(**kp_config)
        try:
            self.client.check_version(timeout_ms=timeout_ms)
        except kafka_errors.KafkaError as exc:
            self.client.close()
            refusal = sasl_refusal(kp_config, min(timeout_ms / 1000, 10.0))
            if refusal is not None:
                raise ConfigurationError(
                    f"authentication failed for user {user!r} "
                    f"({kp_config['sasl_mechanism']}) at {servers}: {refusal}; "
                    "check sasl.username, sasl.password and sasl.mechanism"
                ) from None
            raise BrokerUnreachableError(
                f"no Kafka broker answered at {servers} within {timeout_ms} ms "
                f"({type(exc).__name__})"
            ) from None

    def close(self) -> None:
        self.client.close()

    def offered(self, api: int) -> tuple[int, int] | None:
        """The broker's (min, max) version of ``api`` from ApiVersions, or None."""
        return self.client._manager.broker_version_data.api_versions.get(int(api))

    def send_any(self, request: Any) -> Any:
        """Send a request any broker can answer (Metadata, FindCoordinator): to the least
        loaded node, then, while connections are lost, to each other known node in turn.

        A node killed a moment ago stays in the cluster's metadata until the controller
        fences it (``broker.session.timeout.ms``); Kafka's own clients route around it,
        and so must we: one node down during a rolling restart is not an error. Only
        when no node answers is the connection lost.

        A node that does not answer at all (paused: its connection stays open) gets at
        most :data:`~..defaults.ANY_NODE_ATTEMPT_MS` while another node is left to ask;
        the last one gets the whole request timeout.
        """
        tried: list[int | str] = []
        last: ConnectionLostError | None = None
        while True:
            node = self._untried_node(tried)
            if node is None:
                raise ConnectionLostError(
                    f"{request.__class__.__name__}: no Kafka node answered "
                    f"(tried {', '.join(map(str, tried))}); last: {last}"
                )
            others = self._untried_node([*tried, node]) is not None
            bound = min(self._timeout_ms, defaults.ANY_NODE_ATTEMPT_MS) if others else None
            try:
                return self.send(node, request, timeout_ms=bound)
            except ConnectionLostError as exc:
                last = exc
                tried.append(node)
                log.info("%s; asking another node", exc)

    def _untried_node(self, tried: Sequence[int | str]) -> int | str | None:
        """The least loaded node if not tried yet, else any known node not tried yet
        (kafka-python's choice skips a node only while its reconnect backoff lasts)."""
        least = self.client.least_loaded_node(bootstrap_fallback=True)
        if least is not None and least not in tried:
            return least
        cluster = self.client.cluster
        known = sorted(b.node_id for b in cluster.brokers()) or [
            b.node_id for b in cluster.bootstrap_brokers()
        ]
        return next((node for node in known if node not in tried), None)

    def settle(self) -> None:
        """Let the client see what happened while nobody polled it, before sending.

        Why: a connection that idled past ``connections.max.idle.ms`` has been closed by
        the broker (10 minutes by default), or is due to be closed by kafka-python's own
        idle check (9 minutes), which only runs when the client is polled. Unpolled, the
        next request went out on it and failed: the broker's close read as a lost
        connection, kafka-python's cancelled the request in flight. On a one-node cluster
        that was ``no Kafka node answered``. Polled once without waiting, the closed
        connection is dropped first and the request opens a new one.
        """
        self.client.poll(timeout_ms=0)

    def send(self, node: int | str, request: Any, timeout_ms: int | None = None) -> Any:
        self.settle()
        try:
            return self.client.send_and_receive(
                node, request, timeout_ms=timeout_ms or self._timeout_ms
            )
        except _LOST as exc:
            raise self._lost(node, request, exc, timeout_ms) from None

    def send_all(self, batches: Mapping[int, Sequence[Any]]) -> dict[int, list[Any]]:
        """Send each node its requests without waiting for each answer, every node at once;
        per node, the answers in order, a lost one as its :class:`ConnectionLostError`
        (returned, not raised).

        Up to the connection's in-flight limit are on the wire per node (kafka-python fails
        a send beyond it rather than queueing it): a thousand EndTxns cost the brokers'
        time, not a thousand round trips, and the coordinators of a cluster work at the
        same time rather than one after another.
        """
        answers, queues = self._ready(batches)
        deadline = time.monotonic() + self._timeout_ms / 1000
        window = max(1, self._in_flight - 1)
        flying: dict[int, deque[tuple[int, Any, Any]]] = {node: deque() for node in queues}
        while any(queues.values()) or any(flying.values()):
            for node, queue in queues.items():
                while queue and len(flying[node]) < window:
                    i, request = queue.popleft()
                    flying[node].append((i, request, self.client.send(node, request)))
            waiting = [q[0][2] for q in flying.values() if q and not q[0][2].is_done]
            if waiting and time.monotonic() < deadline:
                self._wait(waiting[0], deadline)
            self._collect(answers, queues, flying, timed_out=time.monotonic() >= deadline)
        return answers

    def _ready(
        self, batches: Mapping[int, Sequence[Any]]
    ) -> tuple[dict[int, list[Any]], dict[int, deque[tuple[int, Any]]]]:
        """Connect to each node first; a node that cannot be reached answers every one of
        its requests with the lost connection, and the others' are queued to be sent."""
        answers: dict[int, list[Any]] = {}
        queues: dict[int, deque[tuple[int, Any]]] = {}
        self.settle()
        for node, requests in batches.items():
            try:
                self.client.await_ready(node, timeout_ms=self._timeout_ms)
            except _LOST as exc:
                lost = self._lost(node, requests[0], exc, self._timeout_ms) if requests else None
                answers[node] = [lost] * len(requests)
                continue
            answers[node] = [None] * len(requests)
            queues[node] = deque(enumerate(requests))
        return answers, queues

    def _collect(
        self,
        answers: dict[int, list[Any]],
        queues: dict[int, deque[tuple[int, Any]]],
        flying: dict[int, deque[tuple[int, Any, Any]]],
        *,
        timed_out: bool,
    ) -> None:
        """Take the answered requests off each connection, in order (Kafka answers a
        connection's requests in the order sent); past the deadline, everything still
        flying or queued is unanswered."""
        for node, q in flying.items():
            while q and (q[0][2].is_done or timed_out):
                i, request, future = q.popleft()
                answers[node][i] = self._answer(node, request, future)
            if timed_out:
                for i, request in queues[node]:
                    answers[node][i] = self._lost(
                        node, request, kafka_errors.KafkaTimeoutError(), self._timeout_ms
                    )
                queues[node].clear()

    def _answer(self, node: int, request: Any, future: Any) -> Any:
        if future.succeeded():
            return future.value
        exc = future.exception if future.failed() else kafka_errors.KafkaTimeoutError()
        return self._lost(node, request, exc, self._timeout_ms)

    def _wait(self, future: Any, deadline: float) -> None:
        """Poll the connection until ``future`` is answered or ``deadline`` passes."""
        left_ms = int((deadline - time.monotonic()) * 1000)
        if not future.is_done and left_ms > 0:
            self.client.poll(timeout_ms=left_ms, future=future)

    def _lost(
        self, node: int | str, request: Any, exc: BaseException, timeout_ms: int | None
    ) -> ConnectionLostError:
        if not isinstance(exc, _LOST):
            raise exc
        waited = f" within {timeout_ms} ms" if timeout_ms else ""
        return ConnectionLostError(
            f"{request.__class__.__name__} to node {node}{self._address(node)}: "
            f"{type(exc).__name__}{waited}"
        )

    def _address(self, node: int | str) -> str:
        """`` at host:port`` of a node the client knows, for error texts; else empty."""
        broker = self.client.cluster.broker_metadata(node)
        return f" at {broker.host}:{broker.port}" if broker is not None else ""
