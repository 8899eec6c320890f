"""The transport: one kafka-python network client that sends a request to a node, or to
whichever node answers, and turns a lost connection into :class:`ConnectionLostError`.

Apart from the builders and parsers (they never send) and from :mod:`.failover` (which
asks again, elsewhere, until a deadline): this module asks once, but never gives up on
the cluster because one node is down.
"""

from __future__ import annotations

import logging
import time
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

    def send(self, node: int | str, request: Any, timeout_ms: int | None = None) -> Any:
        try:
            return self.client.send_and_receive(
                node, request, timeout_ms=timeout_ms or self._timeout_ms
            )
        except _LOST as exc:
            raise self._lost(node, request, exc, timeout_ms) from None

    def send_all(self, node: int, requests: Sequence[Any]) -> list[Any]:
        """Send ``requests`` to one node without waiting for each answer; the answers, in
        order, a lost one as its :class:`ConnectionLostError` (returned, not raised).

        Up to the connection's in-flight limit are on the wire at once (kafka-python fails
        a send beyond it rather than queueing it): a thousand EndTxns cost the broker's
        time, not a thousand round trips.
        """
        try:
            self.client.await_ready(node, timeout_ms=self._timeout_ms)
        except _LOST as exc:
            lost = self._lost(node, requests[0], exc, self._timeout_ms) if requests else None
            return [lost] * len(requests)
        deadline = time.monotonic() + self._timeout_ms / 1000
        window = max(1, self._in_flight - 1)
        futures: list[Any] = []
        for request in requests:
            if len(futures) >= window:
                self._wait(futures[-window], deadline)
            futures.append(self.client.send(node, request))
        for future in futures:
            self._wait(future, deadline)
        answers: list[Any] = []
        for request, future in zip(requests, futures, strict=True):
            if future.succeeded():
                answers.append(future.value)
            else:
                exc = future.exception if future.failed() else kafka_errors.KafkaTimeoutError()
                answers.append(self._lost(node, request, exc, self._timeout_ms))
        return answers

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
