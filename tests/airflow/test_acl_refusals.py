"""Every refusal by ACL is an AuthorizationError, on every path an export takes.

On the secured broker (TLS, SASL/SCRAM, the KRaft ``StandardAuthorizer``;
``tests/support/secure.py``) the principal ``User:refused`` gets exactly the ACLs
``kafka2pc acls`` prints for a fresh topic and id prefix, minus the one a path needs. Each
path, entered as the export's tasks enter it (the hooks over the Airflow connections), must
raise :class:`AuthorizationError` naming the principal, the resource, what was refused and
the ``kafka2pc acls`` command; no secret in it; and nothing left behind: the ledger as it
was, the prepared transaction still open (then ended by the admin) and none opened.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from airflow_provider_kafka2pc.connection.acls import apply_acls, export_acls
from airflow_provider_kafka2pc.coordination.decision import assess
from airflow_provider_kafka2pc.errors import AuthorizationError, PermanentError
from airflow_provider_kafka2pc.hooks.export import ExportHook
from airflow_provider_kafka2pc.hooks.kafka2pc import Kafka2pcHook
from airflow_provider_kafka2pc.ledger import BatchState, ParticipantState, Verdict
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.protocol.described import CoordinatorTxnState
from airflow_provider_kafka2pc.transaction.audit import audit_topic
from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.controller import TransactionController
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from tests.airflow import dagtest

pytestmark = pytest.mark.slow

PRINCIPAL = "refused"
CONN_ID = "kafka_refused"
ROWS = [(f"k{i}".encode(), json.dumps({"id": i}).encode()) for i in range(10)]
TOPIC_ACLS = {("TOPIC", "WRITE"), ("TOPIC", "READ"), ("TOPIC", "DESCRIBE")}
ID_ACLS = {("TRANSACTIONAL_ID", "WRITE"), ("TRANSACTIONAL_ID", "DESCRIBE")}


@dataclass
class Setup:
    """One export's topic, prefix and a batch the admin prepared, as the refused principal
    sees them through the hooks."""

    topic: str
    prefix: str
    export_id: str
    run_key: str
    committable: Committable
    settings: dict[str, Any]
    password: str
    ledger: Any

    @property
    def tid(self) -> str:
        return self.committable.transactional_id

    def hook(self) -> ExportHook:
        return ExportHook(CONN_ID, dagtest.LEDGER_CONN_ID)


@pytest.fixture
def setup(
    request: pytest.FixtureRequest, secure_broker: Any, ledger: Any, monkeypatch: Any
) -> Iterator[Callable[..., Setup]]:
    """``setup(missing, verdict)``: User:refused with the export's ACLs minus ``missing``
    ((resource, operation) pairs), and a PREPARED batch (``verdict`` recorded if given)."""
    made: list[Setup] = []

    def make(missing: set[tuple[str, str]], verdict: Verdict | None = None) -> Setup:
        topic = secure_broker.create_topic(1)
        prefix = f"rf{uuid.uuid4().hex[:8]}"
        entries = [
            e
            for e in export_acls(f"User:{PRINCIPAL}", prefix, [topic])
            if (e.resource_type, e.operation) not in missing
        ]
        if entries:
            apply_acls(secure_broker.admin, entries)
        time.sleep(1.0)  # ACLs reach the authorizer through the metadata log
        settings = secure_broker.sasl_ssl(PRINCIPAL)
        for key, value in dagtest.kafka_connection_env(settings, CONN_ID).items():
            monkeypatch.setenv(key, value)
        export_id, run_key = f"acl.{prefix}", "2026-11-26"
        with ledger.open() as store:
            batch = store.begin(export_id, run_key, topic=topic, id_prefix=prefix, num_partitions=1)
            committable = TransactionalWriter(
                secure_broker.admin, batch.transactional_ids[0]
            ).write(topic, ROWS)
            store.record_prepared(export_id, run_key, [committable], source_rows=len(ROWS))
            if verdict is not None:
                store.decide(export_id, run_key, verdict, "test")
        one = Setup(
            topic,
            prefix,
            export_id,
            run_key,
            committable,
            settings,
            secure_broker.passwords[PRINCIPAL],
            ledger,
        )
        made.append(one)
        return one

    yield make
    # Nothing left open: the admin ends what the refused principal could not.
    with KafkaProtocol(secure_broker.admin, timeout_ms=10_000) as admin:
        for one in made:
            TransactionController(admin).abort(one.committable)
            left = [
                t
                for t in admin.list_transactions(one.prefix)
                if t.state is CoordinatorTxnState.ONGOING
            ]
            assert not left, left


def assert_refused(
    exc: BaseException, setup: Setup, error_name: str, resource: str, action: str
) -> None:
    assert isinstance(exc, AuthorizationError), repr(exc)
    message = str(exc)
    assert exc.error_name == error_name, message
    assert isinstance(exc, PermanentError)
    assert message.startswith(f"User:{PRINCIPAL} may not {action}"), message
    assert f"the broker answered {error_name}" in message, message
    assert resource in message, message  # the resource the ACL is missing on
    assert "kafka2pc acls" in message, message
    assert setup.password not in message


def assert_ledger_unchanged(setup: Setup, state: BatchState) -> None:
    with setup.ledger.open() as store:
        batch = store.get(setup.export_id, setup.run_key)
        assert batch.state is state, batch
        parts = store.participants(setup.export_id, setup.run_key)
        assert [p.state for p in parts] == [ParticipantState.PREPARED], parts


# -- prepare ---------------------------------------------------------------------------------


def test_prepare_refused_writing_the_topic_is_named_at_the_topic_check(setup):
    """WRITE on the topic taken away (READ and DESCRIBE kept): the prepare's topic check
    (Metadata's authorized operations) refuses before Spark or a transaction starts;
    librdkafka would only report its records purged."""
    s = setup({("TOPIC", "WRITE")})
    with pytest.raises(AuthorizationError) as caught:
        Kafka2pcHook(CONN_ID).check_topic(s.topic)
    assert_refused(
        caught.value, s, "TOPIC_AUTHORIZATION_FAILED", s.topic, f"write to topic '{s.topic}'"
    )


def test_prepare_refused_the_topic_is_not_create_the_topic(setup):
    """No ACL on the topic at all (DESCRIBE, which READ and WRITE imply): the writer's own
    topic check names the refusal, not 'create it first'; no transaction is opened."""
    s = setup(TOPIC_ACLS)
    with pytest.raises(AuthorizationError) as caught:
        TransactionalWriter(s.settings, f"{s.prefix}-1", timeout_s=10).write(s.topic, ROWS)
    assert_refused(caught.value, s, "TOPIC_AUTHORIZATION_FAILED", s.topic, "prepare")
    assert "create it" not in str(caught.value)


def test_prepare_refused_the_transactional_id(setup):
    """WRITE on the id prefix taken away (DESCRIBE kept): InitProducerId is refused."""
    s = setup({("TRANSACTIONAL_ID", "WRITE")})
    tid = f"{s.prefix}-1"
    with pytest.raises(AuthorizationError) as caught:
        TransactionalWriter(s.settings, tid, timeout_s=10).write(s.topic, ROWS)
    assert_refused(caught.value, s, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", tid, "prepare")


def test_prepare_needs_no_cluster_idempotent_write(setup):
    """The export's ACLs hold no CLUSTER IDEMPOTENT_WRITE: a transactional producer does
    not need it (Kafka 3.0+), so lacking it refuses nothing."""
    s = setup(set())
    prepared = TransactionalWriter(s.settings, f"{s.prefix}-1", timeout_s=10).write(s.topic, ROWS)
    assert prepared.record_count == len(ROWS)
    with KafkaProtocol(s.settings, timeout_ms=10_000) as protocol:
        assert TransactionController(protocol).abort(prepared).outcome.aborted


# -- decide, commit, abort, recover, audit ---------------------------------------------------


def test_decide_refused_describing_the_transactions(setup):
    """No ACL on the id prefix: DescribeTransactions is refused, and the decision says so
    instead of reading the markers and judging the batch open."""
    s = setup(ID_ACLS)
    hook = s.hook()
    with hook.ledger() as store, pytest.raises(AuthorizationError) as caught:
        batch = store.get(s.export_id, s.run_key)
        with hook.kafka.protocol() as protocol:
            assess(
                batch,
                store.participants(s.export_id, s.run_key),
                protocol,
                now_ms=int(time.time() * 1000),
                commit_margin_ms=1000,
            )
    assert_refused(caught.value, s, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", s.tid, "describe")
    assert_ledger_unchanged(s, BatchState.PREPARED)


@pytest.mark.parametrize(
    ("missing", "error", "on_topic"),
    [
        (("TOPIC", "READ"), "TOPIC_AUTHORIZATION_FAILED", True),
        (("TRANSACTIONAL_ID", "WRITE"), "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False),
    ],
    ids=["topic READ (the markers)", "id WRITE (EndTxn)"],
)
@pytest.mark.parametrize("verdict", [Verdict.COMMIT, Verdict.ABORT])
def test_commit_and_abort_refused(setup, missing, error, on_topic, verdict):
    s = setup({missing}, verdict)
    with pytest.raises(AuthorizationError) as caught, s.hook().coordinator() as coordinator:
        if verdict is Verdict.COMMIT:
            coordinator.commit(s.export_id, s.run_key)
        else:
            coordinator.abort(s.export_id, s.run_key, "test")
    resource = s.topic if on_topic else s.tid
    assert_refused(caught.value, s, error, resource, "")
    state = BatchState.COMMIT_DECIDED if verdict is Verdict.COMMIT else BatchState.ABORT_DECIDED
    assert_ledger_unchanged(s, state)


def test_recover_refused_stops_the_round_with_the_refusal(setup):
    """A COMMIT verdict past the grace period, the topic's READ taken away: the round
    raises the refusal (no later round would do better) instead of filing it in a report."""
    s = setup({("TOPIC", "READ")}, Verdict.COMMIT)
    with pytest.raises(AuthorizationError) as caught:
        s.hook().recover(s.export_id, run_key=None, id_prefix=s.prefix, grace_period=timedelta(0))
    assert_refused(caught.value, s, "TOPIC_AUTHORIZATION_FAILED", s.topic, "")
    assert_ledger_unchanged(s, BatchState.COMMIT_DECIDED)


def test_audit_refused_reading_the_topic(setup):
    s = setup({("TOPIC", "READ")})
    with pytest.raises(AuthorizationError) as caught, Kafka2pcHook(CONN_ID).protocol() as protocol:
        audit_topic(protocol, s.topic)
    assert_refused(caught.value, s, "TOPIC_AUTHORIZATION_FAILED", s.topic, "")
