"""The ACLs of an export and the reading of the broker's refusals, as tables.

README "ACLs: exactly what an export needs"; on a real broker: tests/integration/test_acls.py.
"""

from __future__ import annotations

import time

import kafka.errors as kafka_errors
import pytest

from airflow_provider_kafka2pc.connection.acls import (
    apply_acls,
    authorization_error,
    authorization_failure,
    export_acls,
    principal_of,
)
from airflow_provider_kafka2pc.errors import (
    AuthorizationError,
    BrokerUnreachableError,
    ConfigurationError,
    ProtocolError,
)


def test_an_export_gets_write_read_describe_on_its_topic_and_write_describe_on_its_ids():
    entries = export_acls("User:orders", "orders", ["orders", "orders"])  # a topic once
    assert [(e.resource_type, e.pattern_type, e.resource_name, e.operation) for e in entries] == [
        ("TOPIC", "LITERAL", "orders", "WRITE"),
        ("TOPIC", "LITERAL", "orders", "READ"),
        ("TOPIC", "LITERAL", "orders", "DESCRIBE"),
        ("TRANSACTIONAL_ID", "PREFIXED", "orders-", "WRITE"),
        ("TRANSACTIONAL_ID", "PREFIXED", "orders-", "DESCRIBE"),
    ]
    assert {(e.principal, e.host, e.permission) for e in entries} == {("User:orders", "*", "ALLOW")}
    assert [e.operation for e in entries if e.implied_by] == ["DESCRIBE", "DESCRIBE"]


@pytest.mark.parametrize(
    ("principal", "prefix", "topics", "named"),
    [
        pytest.param("orders", "p", ["t"], "Type:name", id="principal without its type"),
        pytest.param("User:a b", "p", ["t"], "Type:name", id="principal with a space"),
        pytest.param("User:x", "bad prefix", ["t"], "id_prefix", id="invalid id prefix"),
        pytest.param("User:x", "p", [], "at least one topic", id="no topic"),
    ],
)
def test_bad_input_is_refused_naming_it(principal, prefix, topics, named):
    with pytest.raises(ConfigurationError, match=named):
        export_acls(principal, prefix, topics)


@pytest.mark.parametrize(
    ("error", "name"),
    [
        pytest.param(
            ProtocolError("x", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
            id="our name",
        ),
        pytest.param(
            ProtocolError("x", "TopicAuthorizationFailedError"),
            "TOPIC_AUTHORIZATION_FAILED",
            id="kafka-python's class name, as error_name() gives it",
        ),
        pytest.param(
            kafka_errors.TransactionalIdAuthorizationFailedError(),
            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
            id="kafka-python's exception (describe_transactions)",
        ),
        pytest.param(
            kafka_errors.GroupAuthorizationFailedError(),
            "GROUP_AUTHORIZATION_FAILED",
            id="group",
        ),
        pytest.param(ProtocolError("x", "INVALID_TXN_STATE"), None, id="not authorization"),
        pytest.param(ValueError("x"), None, id="not Kafka's"),
    ],
)
def test_authorization_refusals_are_recognised_by_kafka_name(error, name):
    assert authorization_failure(error) == name


@pytest.mark.parametrize(
    ("settings", "principal"),
    [
        ({"security.protocol": "SASL_SSL", "sasl.username": "a"}, "User:a"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "b"}, "User:b"),
        (
            {"security.protocol": "SSL", "ssl.certificate.location": "/c.pem"},
            "the principal of client certificate /c.pem",
        ),
        ({}, "User:ANONYMOUS"),
    ],
)
def test_the_principal_is_named_from_the_settings(settings, principal):
    assert principal_of(settings) == principal


def test_a_refusal_names_principal_answer_operation_and_resource_without_secrets():
    settings = {
        "security.protocol": "SASL_SSL",
        "sasl.username": "export-a",
        "sasl.password": "pw-secret",
    }
    refusal = authorization_error(
        ProtocolError(
            "FindCoordinator for 'b-0': TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        ),
        settings,
        "fence",
        transactional_ids=["b-0"],
    )
    assert isinstance(refusal, AuthorizationError)
    assert refusal.error_name == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    text = str(refusal)
    assert text.startswith("User:export-a may not fence: the broker answered ")
    assert "It needs WRITE on TRANSACTIONAL_ID 'b-0'" in text
    assert "pw-secret" not in text
    assert authorization_error(ProtocolError("x", "INVALID_TXN_STATE"), settings, "fence") is None


def test_no_broker_to_manage_acls_is_named_within_the_timeout():
    """kafka-python's admin client raises a timeout when no broker answers; the error names
    the address, within the timeout given (not the client's own 30 s)."""
    started = time.monotonic()
    with pytest.raises(BrokerUnreachableError, match=r"127\.0\.0\.1:1 within 1000 ms"):
        apply_acls({"bootstrap.servers": "127.0.0.1:1"}, [], timeout_ms=1000)
    assert time.monotonic() - started < 10
