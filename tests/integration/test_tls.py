"""TLS on a real broker: mutual TLS with an encrypted client key for both clients, and a
wrong CA or host name named clearly before any transaction opens.

The broker (tests/support/secure.py) serves a certificate for ``127.0.0.1`` signed by a
CA made at test time, requires a client certificate on its SSL listener and enforces
ACLs: the client ``export-tls`` may only use what ``export_acls`` grants it. The whole
export over TLS (Airflow, Spark, commit) is tests/airflow/test_export_tls.py.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka2pc.connection.tls import check_tls, tls_problem
from airflow_provider_kafka2pc.errors import TlsError
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.spark.prepare import _check_topic
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from tests.conftest import assert_exactly_once, cli, unique_id, write_jsonl
from tests.support.secure import TLS_PRINCIPAL

#: What each wrong setting must be called, by every entry point.
NAMED = {
    "ca": "TLS certificate verification failed",
    "host": "TLS host name verification failed",
}


def rows(start: int, count: int) -> list[tuple[bytes, bytes]]:
    return [(f"k{i}".encode(), json.dumps({"id": i}).encode()) for i in range(start, start + count)]


def private_json(path: Path, settings: dict[str, Any]) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(settings, handle)
    return path


@pytest.fixture
def tls_export(secure_broker) -> tuple[str, str]:
    """A topic and an id prefix ``export-tls`` holds exactly the export ACLs for."""
    topic = secure_broker.create_topic(2)
    prefix = unique_id("tls")
    secure_broker.grant_export(f"User:{TLS_PRINCIPAL}", prefix, topic)
    return topic, prefix


def test_writer_and_control_plane_over_mutual_tls_with_an_encrypted_key(
    secure_broker, tls_export, caplog
):
    topic, prefix = tls_export
    settings = secure_broker.tls()
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="kafka")
    committables = [
        TransactionalWriter(settings, f"{prefix}-{i}").write(topic, rows(i * 50, 50))
        for i in range(2)
    ]
    with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
        results = TransactionController(protocol).commit_all(committables)
        assert [r.outcome for r in results] == [Outcome.COMMITTED] * 2
        # Both witnesses over mutual TLS, as the export's own principal.
        assert_exactly_once(protocol, settings, topic, *committables, committed=100, aborted=0)
    assert "ssl" in caplog.text.lower()  # the clients' DEBUG output was captured
    assert settings["ssl.key.password"] not in caplog.text


@pytest.mark.parametrize("wrong", ["ca", "host"])
def test_a_wrong_ca_or_host_name_is_named_before_any_transaction_opens(
    secure_broker, tls_export, wrong, tmp_path
):
    topic, prefix = tls_export
    tid = f"{prefix}-0"
    if wrong == "ca":
        bad = secure_broker.tls(ca=secure_broker.wrong_ca.cert_path)
    else:  # the certificate names 127.0.0.1 only; localhost is the same machine
        bad = secure_broker.tls(host="localhost")

    with pytest.raises(TlsError, match=NAMED[wrong]) as raised:
        check_tls(bad)
    message = str(raised.value)
    if wrong == "ca":
        assert "issued by CN=kafka2pc test CA" in message and "ssl.ca.location" in message
    else:
        assert "does not name 'localhost' (it names IP 127.0.0.1)" in message

    # The Spark prepare job's driver checks before any executor writes.
    with pytest.raises(TlsError, match=NAMED[wrong]):
        _check_topic(bad, topic)

    # The writer (kafka2pc prepare) and the control plane (fence), each in its own process,
    # the key's password in a private file: refused at once, naming the TLS problem.
    config = private_json(tmp_path / "kafka.json", bad)
    source = write_jsonl(tmp_path / "rows.jsonl", 10)
    for command in (
        ["prepare", "-t", topic, "--transactional-id", tid, "--input", str(source)],
        ["fence", "--transactional-id", tid],
        ["txn", "list", "--prefix", prefix],
    ):
        began = time.monotonic()
        done = cli(*command, "--config-file", str(config), "--timeout-ms", "20000")
        took = time.monotonic() - began
        assert done.returncode == 2, done.stdout + done.stderr
        answer = json.loads(done.stdout)
        assert answer["error"] == "TlsError" and NAMED[wrong] in answer["message"], answer
        assert took < 15, f"{command[0]}: {took:.1f} s: the client's timeout, not the check"
        assert bad["ssl.key.password"] not in done.stdout + done.stderr

    # Nothing was opened: the id was never initialised, nothing is listed, nothing written.
    with KafkaProtocol(secure_broker.admin, timeout_ms=10_000) as admin:
        assert admin.describe_transaction(tid) is None
        assert admin.list_transactions(prefix) == []
        assert_exactly_once(admin, secure_broker.admin, topic, committed=0, aborted=0)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({}, None),
        ({"ssl.ca.location": "/nonexistent/ca.pem"}, "ssl.ca.location /nonexistent/ca.pem: no"),
        ({"ssl.key.password": "not-the-password"}, "ssl.key.password does not decrypt"),
        (
            {"ssl.certificate.location": None, "ssl.key.location": None, "ssl.key.password": None},
            "requires a client certificate (mutual TLS)",
        ),
        ({"ssl.endpoint.identification.algorithm": "none", "host": "localhost"}, None),
        ({"listener": "PLAINTEXT"}, "is this port a TLS listener?"),
    ],
    ids=["right", "no-ca-file", "wrong-key-password", "no-client-cert", "no-host-check", "plain"],
)
def test_each_tls_problem_is_named(secure_broker, change, named):
    change = dict(change)
    settings = secure_broker.tls(host=change.pop("host", None))
    if change.pop("listener", None):
        settings["bootstrap.servers"] = secure_broker.broker.bootstrap_servers
    for key, value in change.items():
        if value is None:
            settings.pop(key)
        else:
            settings[key] = value
    problem = tls_problem(settings, timeout_s=5)
    if named is None:
        assert problem is None
    else:
        assert problem is not None and named in problem, problem
        assert secure_broker.tls_client.key_password not in problem


@pytest.mark.parametrize("wrong", ["ca", "host"])
def test_the_control_plane_names_a_tls_failure_instead_of_waiting_out_its_timeout(
    secure_broker, wrong
):
    """KafkaProtocol itself, without a caller's check first: kafka-python alone retries the
    handshake until the timeout, then says no broker answered. With a 10-minute timeout a
    wait would end as BrokerUnreachableError (or the test's own timeout); the answer must be
    the TLS problem, by name."""
    settings = (
        secure_broker.tls(ca=secure_broker.wrong_ca.cert_path)
        if wrong == "ca"
        else secure_broker.tls(host="localhost")
    )
    with pytest.raises(TlsError, match=NAMED[wrong]):
        KafkaProtocol(settings, timeout_ms=600_000)
