"""Riding a failover: one broker call asked again, elsewhere if need be, until a deadline.

When a Kafka node dies, what it led moves: its partitions to another replica once the
controller fences it (``broker.session.timeout.ms``, 9 s by default, then an election),
the transaction coordinators on it to the new leaders of their ``__transaction_state``
partitions, which first load their state (COORDINATOR_LOAD_IN_PROGRESS). Until then a
call meets a refused connection, a stale leader (NOT_LEADER_OR_FOLLOWER) or a
coordinator that is not one any more (NOT_COORDINATOR). Each of these is worth asking
again after re-resolving the leader or coordinator from the surviving nodes; none is an
answer. :class:`Failover` is the one retry loop for that, used by the log reader
(metadata, fetches: log ends, markers, the audit), the controller (FindCoordinator,
EndTxn, InitProducerId) and the protocol's admin calls (Describe/ListTransactions).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from .. import defaults
from ..errors import BrokerMovedError, ConnectionLostError, FailoverTimeoutError

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff under an overall deadline."""

    deadline_s: float = defaults.FINISH_DEADLINE_S
    #: How long to wait for markers after an ambiguous answer before acting on it.
    marker_grace_s: float = 5.0
    initial_backoff_s: float = 0.05
    max_backoff_s: float = 1.0

    def backoff(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.initial_backoff_s * 2 ** max(0, attempt - 1))


class Failover:
    """Runs a broker call again, with backoff, while it fails in a way a failover explains.

    A call signals "ask again" by raising :class:`~..errors.ConnectionLostError` (no
    answer) or :class:`~..errors.BrokerMovedError` (an answer saying: not here, not yet);
    it re-resolves leader or coordinator itself (``on_retry`` or inside the call) so the
    next attempt goes where the cluster now says. Anything else propagates at once. At
    the deadline, :class:`~..errors.FailoverTimeoutError` names the call, how long and
    how often it was tried, and the last thing that went wrong.

    :param policy: deadline (per call, unless one is given) and backoff.
    :param clock: monotonic seconds; injectable with ``sleep`` for tests.
    """

    def __init__(
        self,
        policy: RetryPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.policy = policy or RetryPolicy()
        self.clock = clock
        self.sleep = sleep

    def deadline(self) -> float:
        """A deadline ``policy.deadline_s`` from now."""
        return self.clock() + self.policy.deadline_s

    def run(
        self,
        what: str,
        call: Callable[[], T],
        *,
        deadline: float | None = None,
        on_retry: Callable[[Exception], None] | None = None,
    ) -> T:
        """``call()`` until it returns, fails for good, or ``deadline`` passes."""
        began = self.clock()
        until = self.deadline() if deadline is None else deadline
        attempt = 0
        while True:
            attempt += 1
            try:
                return call()
            except FailoverTimeoutError:
                raise  # an inner call already used this deadline up
            except (ConnectionLostError, BrokerMovedError) as exc:
                last = exc
            if on_retry is not None:
                on_retry(last)
            now = self.clock()
            if now >= until:
                raise FailoverTimeoutError(
                    f"{what}: no usable answer within {now - began:.1f} s "
                    f"({attempt} attempts); last: {last}"
                ) from last
            if attempt == 1:
                log.info("%s: %s; asking again until the deadline", what, last)
            self.sleep(max(0.0, min(self.policy.backoff(attempt), until - now)))
