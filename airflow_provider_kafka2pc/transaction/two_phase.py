"""The KIP-939 switch: a native two-phase-commit transaction where the broker grants one,
else the classic prepare.

A classic prepared transaction lives under its transaction timeout (at most the broker's
``transaction.max.timeout.ms``, 15 min by default): a commit that comes later finds it
aborted. A transaction opened with InitProducerId v6 ``enable2Pc`` never times out; it
waits for the EndTxn of whoever holds its committable. Measured on Apache Kafka 4.4.0
(docs/kip-939.md): a released broker offers v6 only with the internal
``unstable.api.versions.enable=true``, grants ``enable2Pc`` only with
``transaction.two.phase.commit.enable=true``, and librdkafka cannot send v6 at all. So
the switch is feature-detected, and the classic path stays the default.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from .. import defaults
from ..errors import ConfigurationError, ConnectionLostError, ProtocolError
from ..naming import validate_transactional_id
from ..protocol.codes import ErrorCode, error_name
from ..protocol.producer import InitProducerIdAnswer
from ..protocol.seam import NativeTransactionProtocol
from ..protocol.versions import INIT_PRODUCER_ID_2PC_VERSION, ApiKey

log = logging.getLogger(__name__)


class TwoPhaseMode(enum.Enum):
    #: librdkafka writer; the transaction is aborted at its transaction timeout.
    CLASSIC = "classic"
    #: KIP-939 enable2Pc, protocol-level writer; the coordinator never times it out.
    NATIVE = "native"


#: What a caller may ask for: ``auto`` takes NATIVE where the broker grants it.
REQUESTS = ("auto", "classic", "native")


class GrantAction(enum.Enum):
    GRANTED = "granted"
    REFUSED = "refused"  # the broker answered: no 2PC for this id
    REFIND_COORDINATOR = "refind"
    RETRY = "retry"
    FATAL = "fatal"


INIT_2PC_ACTIONS: dict[int, GrantAction] = {
    ErrorCode.NONE: GrantAction.GRANTED,
    # transaction.two.phase.commit.enable=false (the default), or no TWO_PHASE_COMMIT ACL.
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: GrantAction.REFUSED,
    ErrorCode.UNSUPPORTED_VERSION: GrantAction.REFUSED,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: GrantAction.REFIND_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: GrantAction.REFIND_COORDINATOR,
    ErrorCode.NOT_COORDINATOR: GrantAction.REFIND_COORDINATOR,
    # The id's open transaction is being aborted by this very request: ask again.
    ErrorCode.CONCURRENT_TRANSACTIONS: GrantAction.RETRY,
}
"""InitProducerId (enable2Pc) answer -> action. Anything not listed: FATAL."""

_WHY_NOT_RELEASED = (
    "No released Apache Kafka offers it by default (4.4.0 probed, docs/kip-939.md): every "
    "broker needs transaction.two.phase.commit.enable=true and the internal, unsupported "
    "unstable.api.versions.enable=true. librdkafka (confluent-kafka) cannot send "
    "InitProducerId v6 at all, so only kafka2pc's protocol-level native writer can open "
    "such a transaction. Use two-phase 'classic' (bounded by the broker's "
    "transaction.max.timeout.ms) or 'auto'."
)


@dataclass(frozen=True)
class Grant:
    """The coordinator's answer to InitProducerId v6 with enable2Pc for one id."""

    node: int
    answer: InitProducerIdAnswer

    @property
    def granted(self) -> bool:
        return self.answer.error == ErrorCode.NONE


def not_offered_message(offered_version: int | None) -> str:
    offered = "no InitProducerId" if offered_version is None else f"v{offered_version}"
    return (
        "native two-phase commit (KIP-939) was asked for, but the broker does not offer it: "
        f"its ApiVersions list InitProducerId up to {offered}, and enable2Pc needs "
        f"v{INIT_PRODUCER_ID_2PC_VERSION}. " + _WHY_NOT_RELEASED
    )


def refusal_message(transactional_id: str, code: int) -> str:
    why = (
        "transaction.two.phase.commit.enable is false on the broker (the default), or the "
        "principal lacks the TWO_PHASE_COMMIT (and WRITE) ACL on that transactional id"
        if code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        else "the broker does not support it"
    )
    return (
        "native two-phase commit (KIP-939) was asked for: the broker offers InitProducerId "
        f"v{INIT_PRODUCER_ID_2PC_VERSION} but refused enable2Pc for transactional id "
        f"{transactional_id!r} ({error_name(code)}): {why}. " + _WHY_NOT_RELEASED
    )


def request_two_phase(
    protocol: NativeTransactionProtocol,
    transactional_id: str,
    transaction_timeout_ms: int,
    *,
    deadline_s: float = defaults.WRITER_DEADLINE_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Grant:
    """InitProducerId v6 with enable2Pc for ``transactional_id``: granted or refused.

    Like every InitProducerId it aborts whatever the id left open (the coordinator answers
    CONCURRENT_TRANSACTIONS until the abort is written). A refusal changes nothing.
    Raises ProtocolError for an answer outside :data:`INIT_2PC_ACTIONS` or when the
    coordinator stays unavailable past the deadline.
    """
    deadline = clock() + deadline_s
    attempt = 0
    while True:
        attempt += 1
        node = -1
        try:
            found, node = protocol.find_transaction_coordinator(transactional_id)
            # FindCoordinator's own error stands in for the answer (it may be a refusal).
            answer = InitProducerIdAnswer(found, -1, -1)
            if found == ErrorCode.NONE:
                answer = protocol.init_producer_id(
                    node, transactional_id, transaction_timeout_ms, enable_2pc=True
                )
        except ConnectionLostError:
            answer = InitProducerIdAnswer(ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1)
        code = answer.error
        action = INIT_2PC_ACTIONS.get(code, GrantAction.FATAL)
        if action in (GrantAction.GRANTED, GrantAction.REFUSED):
            log.info(
                "InitProducerId enable2Pc for %s: %s (pid %s, epoch %s)",
                transactional_id,
                error_name(code),
                answer.producer_id,
                answer.producer_epoch,
            )
            return Grant(node, answer)
        if action is GrantAction.FATAL or clock() >= deadline:
            raise ProtocolError(
                f"InitProducerId (enable2Pc) for {transactional_id!r}: {error_name(code)} "
                f"after {attempt} attempt(s); nothing was opened",
                error_name(code),
            )
        sleep(min(1.0, 0.05 * 2 ** (attempt - 1)))


def detect_two_phase(
    protocol: NativeTransactionProtocol,
    requested: str = "auto",
    *,
    transactional_id: str,
    transaction_timeout_ms: int = defaults.FENCE_TIMEOUT_MS,
    deadline_s: float = defaults.WRITER_DEADLINE_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> TwoPhaseMode:
    """Which prepare to use for ``transactional_id``: ``requested`` is auto/classic/native.

    ``classic`` asks the broker nothing. Otherwise NATIVE needs both the broker's
    ApiVersions offering InitProducerId v6 and the coordinator granting enable2Pc to
    this id: an ACL or the broker setting decides per id, so the probe is the real
    request for the id about to be written (which aborts what it left open, as the
    writer's own initialisation would). ``native`` on a broker that does not grant it
    raises ConfigurationError saying why; ``auto`` then falls back to CLASSIC.
    """
    if requested not in REQUESTS:
        raise ConfigurationError(f"two-phase must be one of {REQUESTS}, got {requested!r}")
    if requested == "classic":
        return TwoPhaseMode.CLASSIC
    validate_transactional_id(transactional_id)
    if not protocol.offers_kip939():
        if requested == "native":
            offered = protocol.api_version(ApiKey.INIT_PRODUCER_ID)
            raise ConfigurationError(not_offered_message(offered))
        log.info("two-phase auto: the broker offers no InitProducerId v6; classic")
        return TwoPhaseMode.CLASSIC
    grant = request_two_phase(
        protocol,
        transactional_id,
        transaction_timeout_ms,
        deadline_s=deadline_s,
        clock=clock,
        sleep=sleep,
    )
    if grant.granted:
        return TwoPhaseMode.NATIVE
    if requested == "native":
        raise ConfigurationError(refusal_message(transactional_id, grant.answer.error))
    log.info(
        "two-phase auto: enable2Pc refused for %s (%s); classic",
        transactional_id,
        error_name(grant.answer.error),
    )
    return TwoPhaseMode.CLASSIC
