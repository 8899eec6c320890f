"""The ACLs an export's principal needs, created with kafka-python's admin client, and
the broker's authorization refusals turned into errors that name the missing ACL.

Measured on Apache Kafka 4.4.0 with the KRaft ``StandardAuthorizer``
(tests/integration/test_acls.py):

- The writer (librdkafka) needs WRITE on the topic (Produce, AddPartitionsToTxn) and
  WRITE on its transactional id (InitProducerId, AddPartitionsToTxn); the control plane
  needs WRITE on the transactional id (EndTxn, InitProducerId to fence) and READ on the
  topic: a commit reads the log's markers to verify itself, before and after EndTxn, and so
  do the audit and recovery. A commit that repairs a lost participant from the log
  (``log_copy``) also reads the lost records (READ) and writes them again as a producer
  (WRITE on the topic and the transactional id): the export's one principal has both.
- DESCRIBE (Metadata, FindCoordinator, DescribeTransactions) is implied by READ and WRITE
  in Kafka's authorizers; it is listed anyway, as Kafka's documentation lists it, so that
  the grant still reads right if WRITE is ever taken away.
- ListTransactions needs nothing more: the broker lists only the transactional ids the
  principal may DESCRIBE, so another export's transactions are not an error but absent.
- No CLUSTER ACL (IDEMPOTENT_WRITE is not needed by transactional producers) and no GROUP
  ACL (the read_committed witness assigns partitions and commits no offsets).
- Transactional ids are ``<prefix>-<slot>``, so the PREFIXED pattern is ``<prefix>-``:
  a pattern on the bare prefix ``orders`` would also grant ``orders2-0``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import kafka.errors as kafka_errors

from .. import defaults
from ..errors import (
    AuthorizationError,
    BrokerUnreachableError,
    ConfigurationError,
    Kafka2pcError,
    ProtocolError,
)
from ..naming import starts, validate_prefix
from .settings import to_kafka_python

#: Kafka's authorization error codes, by name, and the resource each is about.
AUTHORIZATION_ERRORS: dict[str, tuple[int, str]] = {
    "TOPIC_AUTHORIZATION_FAILED": (29, "TOPIC"),
    "GROUP_AUTHORIZATION_FAILED": (30, "GROUP"),
    "CLUSTER_AUTHORIZATION_FAILED": (31, "CLUSTER"),
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": (53, "TRANSACTIONAL_ID"),
    "DELEGATION_TOKEN_AUTHORIZATION_FAILED": (65, "DELEGATION_TOKEN"),
}
#: The same errors under kafka-python's class names (``TopicAuthorizationFailedError``),
#: which is how :func:`~.protocol.error_name` names codes it has no enum member for.
_BY_NAME: dict[str, str] = {}
for _name, (_code, _resource) in AUTHORIZATION_ERRORS.items():
    _BY_NAME[_name] = _name
    _BY_NAME[kafka_errors.for_code(_code).__name__] = _name
_BY_CODE = {code: name for name, (code, _) in AUTHORIZATION_ERRORS.items()}

_PRINCIPAL = re.compile(r"[A-Za-z][A-Za-z0-9_]*:[^\s,;]+")


@dataclass(frozen=True)
class AclEntry:
    """One ALLOW ACL: ``principal`` may do ``operation`` on the resource, from any host."""

    principal: str
    resource_type: str
    pattern_type: str
    resource_name: str
    operation: str
    why: str
    #: An operation the authorizer grants with this one's resource anyway (DESCRIBE with
    #: READ/WRITE), or None.
    implied_by: str | None = None
    host: str = "*"
    permission: str = "ALLOW"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if data["implied_by"] is None:
            del data["implied_by"]
        return data

    def key(self) -> tuple[str, str, str, str, str, str, str]:
        return (
            self.principal,
            self.host,
            self.resource_type,
            self.pattern_type,
            self.resource_name,
            self.operation,
            self.permission,
        )


def validate_principal(principal: object) -> str:
    if not isinstance(principal, str) or not _PRINCIPAL.fullmatch(principal):
        raise ConfigurationError(
            f"principal {principal!r} is not of Kafka's form Type:name (e.g. User:orders-export)"
        )
    return principal


def export_acls(principal: str, id_prefix: str, topics: Sequence[str]) -> list[AclEntry]:
    """Exactly the ACLs one export's principal needs: its topics and its id prefix.

    Enough for the whole export (the Spark writers, the recover, decide, commit and abort
    tasks, ``kafka2pc`` commands and the audit) and nothing of any other export's.
    """
    validate_principal(principal)
    validate_prefix(id_prefix)
    if not topics or any(not isinstance(t, str) or not t for t in topics):
        raise ConfigurationError("at least one topic is needed, each a non-empty name")
    entries: list[AclEntry] = []
    for topic in dict.fromkeys(topics):
        entries += [
            AclEntry(
                principal,
                "TOPIC",
                "LITERAL",
                topic,
                "WRITE",
                "the Spark writers produce into the topic, and so does a loss repair's copy "
                "from the log (Produce, AddPartitionsToTxn)",
            ),
            AclEntry(
                principal,
                "TOPIC",
                "LITERAL",
                topic,
                "READ",
                "commit, abort, recovery and the audit read the log's transaction markers, "
                "and a loss repair the lost records (Fetch)",
            ),
            AclEntry(
                principal,
                "TOPIC",
                "LITERAL",
                topic,
                "DESCRIBE",
                "partitions and leaders of the topic (Metadata)",
                implied_by="WRITE",
            ),
        ]
    pattern = starts(id_prefix)
    entries += [
        AclEntry(
            principal,
            "TRANSACTIONAL_ID",
            "PREFIXED",
            pattern,
            "WRITE",
            "open (InitProducerId), end (EndTxn) and fence the export's transactions",
        ),
        AclEntry(
            principal,
            "TRANSACTIONAL_ID",
            "PREFIXED",
            pattern,
            "DESCRIBE",
            "find their coordinator (FindCoordinator), describe them for the decision and "
            "recovery (DescribeTransactions), and see them listed (ListTransactions lists "
            "only ids the principal may describe)",
            implied_by="WRITE",
        ),
    ]
    return entries


# -- on the broker ---------------------------------------------------------------------------


def _admin(config: Mapping[str, Any], timeout_ms: int) -> Any:
    from kafka.admin import KafkaAdminClient

    settings = to_kafka_python(config)
    settings.setdefault("request_timeout_ms", timeout_ms)
    settings.setdefault("bootstrap_timeout_ms", timeout_ms)  # else 30 s to say "no broker"
    accepted = KafkaAdminClient.DEFAULT_CONFIG
    try:
        return KafkaAdminClient(**{k: v for k, v in settings.items() if k in accepted})
    except (kafka_errors.KafkaTimeoutError, kafka_errors.KafkaConnectionError):
        from .settings import bootstrap_servers

        raise BrokerUnreachableError(
            f"no Kafka broker answered at {bootstrap_servers(config)} within {timeout_ms} ms "
            "to manage ACLs"
        ) from None


def kafka_python_acl(entry: AclEntry) -> Any:
    """``entry`` as kafka-python's admin client takes it."""
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourceType,
    )

    return ACL(
        entry.principal,
        entry.host,
        ACLOperation[entry.operation],
        ACLPermissionType[entry.permission],
        ResourcePattern(
            ResourceType[entry.resource_type],
            entry.resource_name,
            ACLResourcePatternType[entry.pattern_type],
        ),
    )


def apply_acls(
    config: Mapping[str, Any],
    entries: Iterable[AclEntry],
    timeout_ms: int = defaults.REQUEST_TIMEOUT_MS,
) -> list[AclEntry]:
    """Create ``entries`` (CreateAcls, from a principal allowed to ALTER the cluster, e.g. a
    super user); returns them. Creating an ACL that exists already is a no-op for Kafka."""
    entries = list(entries)
    admin = _admin(config, timeout_ms)
    try:
        result = admin.create_acls([kafka_python_acl(e) for e in entries])
    except kafka_errors.KafkaError as exc:
        raise authorization_error(exc, config, "create ACLs") or Kafka2pcError(
            f"creating ACLs failed: {type(exc).__name__}"
        ) from None
    finally:
        admin.close()
    failed = result.get("failed") or []
    if failed:
        why = "; ".join(f"{acl}: {type(err).__name__}" for acl, err in failed)
        first = failed[0][1]
        raise authorization_error(first, config, "create ACLs") or Kafka2pcError(
            f"the broker refused {len(failed)} of {len(entries)} ACLs: {why}"
        )
    return entries


# -- refusals --------------------------------------------------------------------------------


def authorization_failure(exc: BaseException) -> str | None:
    """Kafka's name of the authorization error ``exc`` carries, or None."""
    if isinstance(exc, AuthorizationError):
        return exc.error_name
    if isinstance(exc, ProtocolError) and exc.error_name:
        return _BY_NAME.get(exc.error_name)
    if isinstance(exc, kafka_errors.KafkaError):
        return _BY_CODE.get(getattr(exc, "errno", None))
    return None


def principal_of(config: Mapping[str, Any]) -> str:
    """Who the broker thinks the client is, as far as the settings tell."""
    protocol = str(config.get("security.protocol", "PLAINTEXT")).upper()
    if protocol.startswith("SASL") and config.get("sasl.username"):
        return f"User:{config['sasl.username']}"
    if protocol == "SSL" and config.get("ssl.certificate.location"):
        return f"the principal of client certificate {config['ssl.certificate.location']}"
    return "User:ANONYMOUS" if protocol in ("PLAINTEXT", "SSL") else "this client's principal"


#: What each step needs, by resource type (DESCRIBE is implied by READ and WRITE).
NEEDS: dict[str, dict[str, str]] = {
    "prepare": {"TOPIC": "WRITE", "TRANSACTIONAL_ID": "WRITE"},
    # READ for the markers; WRITE too when the commit repairs a lost participant from the log.
    "commit": {
        "TOPIC": "READ (and WRITE to repair a loss from the log)",
        "TRANSACTIONAL_ID": "WRITE",
    },
    "abort": {"TOPIC": "READ", "TRANSACTIONAL_ID": "WRITE"},
    "fence": {"TRANSACTIONAL_ID": "WRITE"},
    "describe": {"TRANSACTIONAL_ID": "DESCRIBE (or WRITE, which implies it)"},
    "audit": {"TOPIC": "READ"},
}
_DEFAULT_NEEDS = {
    "TOPIC": "WRITE and READ",
    "TRANSACTIONAL_ID": "WRITE",
    "GROUP": "READ",
    "CLUSTER": "the operation refused",
}


def authorization_error(
    exc: BaseException,
    config: Mapping[str, Any],
    action: str,
    *,
    transactional_ids: Sequence[str] = (),
    topics: Sequence[str] = (),
) -> AuthorizationError | None:
    """``exc`` as an :class:`AuthorizationError` naming who lacks which ACL for ``action``
    (a key of :data:`NEEDS`, or any phrase); None when ``exc`` is no authorization
    refusal."""
    name = authorization_failure(exc)
    if name is None:
        return None
    if isinstance(exc, AuthorizationError):
        return exc
    resource = AUTHORIZATION_ERRORS[name][1]
    names = {"TRANSACTIONAL_ID": transactional_ids, "TOPIC": topics}.get(resource, ())
    on = f" {', '.join(repr(n) for n in names)}" if names else ""
    detail = str(exc) if isinstance(exc, Kafka2pcError) else type(exc).__name__
    hint = (
        "`kafka2pc acls --principal User:<name> --id-prefix <prefix> --topic <topic>` prints "
        "the ACLs an export needs"
    )
    if resource == "TRANSACTIONAL_ID":
        hint += (
            "; a transaction of another export's id prefix is refused on purpose: finish it "
            "with that export's credentials"
        )
    needs = NEEDS.get(action, _DEFAULT_NEEDS).get(resource) or _DEFAULT_NEEDS.get(
        resource, "an ACL"
    )
    return AuthorizationError(
        f"{principal_of(config)} may not {action}: the broker answered {name} ({detail}). "
        f"It needs {needs} on {resource}{on}; {hint}",
        name,
    )
