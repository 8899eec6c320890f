"""A whole export over mutual TLS, its principal holding only the export's ACLs; and a
wrong CA failing the run before any transaction opens.

The broker is tests/support/secure.py's: SSL listener with client certificates required,
ACLs enforced. The ``kafka`` connection's extra carries ``ssl.ca.location``,
``ssl.certificate.location``, ``ssl.key.location`` and ``ssl.key.password`` (the key is
encrypted): the recover sensor, the prepare operator and its Spark job (driver and
executors, through the private config file), the decision and the commit all speak TLS
as ``User:export-tls``, which holds exactly ``kafka2pc acls``'s list for its topic and id
prefix. Three witnesses: the log audit and a read_committed consumer over TLS as the
export's principal, and Kafka's own Java console consumer over SASL_SSL as an operator.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka2pc.ledger import BatchState, ParticipantState
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from tests.airflow import dagtest
from tests.conftest import assert_exactly_once, unique_id
from tests.support.java_witness import assert_java_witness
from tests.support.secure import TLS_PRINCIPAL

pytestmark = pytest.mark.slow

ROWS = 300


@pytest.fixture
def tls_export_env(airflow_db: Path, spark_connection: str, ledger: Any, secure_broker: Any) -> Any:
    """Airflow's DB, ``spark_default`` (local[2]) and a fresh ledger; the ``kafka``
    connection is set by each test."""
    return ledger


def set_kafka_connection(monkeypatch: pytest.MonkeyPatch, settings: dict[str, Any]) -> None:
    for key, value in dagtest.kafka_connection_env(settings).items():
        monkeypatch.setenv(key, value)


def test_export_over_mutual_tls_with_only_the_export_acls_commits_exactly_once(
    tls_export_env, secure_broker, monkeypatch, capfd, request
):
    ledger = tls_export_env
    topic = secure_broker.create_topic(3)
    prefix = unique_id("tlsx")
    secure_broker.grant_export(f"User:{TLS_PRINCIPAL}", prefix, topic)
    settings = secure_broker.tls()
    set_kafka_connection(monkeypatch, settings)
    dag = dagtest.export_dag(
        f"tls_export_{request.node.name[-20:]}", topic=topic, rows=ROWS, id_prefix=prefix
    )

    result = dagtest.run(dag, day=3)

    assert result.state == "success", result
    assert result.tasks == {
        "recover": "success",
        "prepare": "success",
        "decide": "success",
        "commit": "success",
        "abort": "skipped",
    }
    prepared = result.xcom("prepare")
    with ledger.open() as store:
        batch = store.get(prepared["export_id"], prepared["run_key"])
        parts = store.participants(prepared["export_id"], prepared["run_key"])
    assert batch.state is BatchState.COMMITTED
    assert [p.state for p in parts] == [ParticipantState.COMMITTED] * 2
    assert all(p.transactional_id.startswith(f"{prefix}-") for p in parts)
    committables = [p.committable for p in parts]
    with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
        assert_exactly_once(protocol, settings, topic, *committables, committed=ROWS, aborted=0)
    java = assert_java_witness(
        secure_broker.broker.sasl_ssl_bootstrap_servers,
        topic,
        committed=ROWS,
        settings=secure_broker.admin,
    )
    print(f"\nJava console consumer (read_committed, SASL_SSL): {java.to_dict()}")

    # The key's password reached Spark through the private file only: never a log line,
    # an XCom, the metadata DB.
    secret = settings["ssl.key.password"]
    out, err = capfd.readouterr()
    assert "Spark-Submit cmd" in out + err
    assert secret not in out + err
    xcoms = [result.xcom(t) for t in ("recover", "prepare", "commit")]
    assert secret not in json.dumps(xcoms)
    assert secret.encode() not in (Path(os.environ["AIRFLOW_HOME"]) / "airflow.db").read_bytes()


def test_export_with_a_wrong_ca_fails_naming_tls_before_any_transaction_opens(
    tls_export_env, secure_broker, monkeypatch, capfd, request
):
    ledger = tls_export_env
    topic = secure_broker.create_topic(2)
    prefix = unique_id("tlsw")
    secure_broker.grant_export(f"User:{TLS_PRINCIPAL}", prefix, topic)
    settings = secure_broker.tls(ca=secure_broker.wrong_ca.cert_path)
    set_kafka_connection(monkeypatch, settings)
    dag = dagtest.export_dag(
        f"tls_wrong_ca_{request.node.name[-20:]}", topic=topic, rows=ROWS, id_prefix=prefix
    )

    result = dagtest.run(dag, day=4)

    assert result.state == "failed", result
    # The first task that connects names the TLS problem and fails without retrying.
    assert result.tasks["recover"] == "failed", result
    assert result.tasks["prepare"] == "upstream_failed", result
    assert result.tries["recover"] == 1, result
    out, err = capfd.readouterr()
    assert "TlsError" in out + err
    assert "TLS certificate verification failed for 127.0.0.1:" in out + err
    assert "issued by CN=kafka2pc test CA" in out + err
    assert settings["ssl.key.password"] not in out + err
    # Nothing was begun in the ledger, nothing opened on the broker.
    export_id = f"{dag.dag_id}.{dagtest.GROUP_ID}"
    with ledger.open() as store:
        assert store.in_doubt(export_id) == [] and store.leases(prefix) == []
    with KafkaProtocol(secure_broker.admin, timeout_ms=10_000) as admin:
        assert admin.list_transactions(prefix) == []
        assert admin.describe_transaction(f"{prefix}-0") is None
        assert_exactly_once(admin, secure_broker.admin, topic, committed=0, aborted=0)
