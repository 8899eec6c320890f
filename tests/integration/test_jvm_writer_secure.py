"""The JVM writer (Kafka's Java producer in Spark's executors) over mutual TLS and SASL_SSL,
with exactly the ACLs ``kafka2pc acls`` grants an export, on the shared secure broker.

The librdkafka-style settings users give are translated for the Java client on the driver
(spark/jvm_settings.py): the CA as a PEM trust store, the client certificate with its
encrypted PKCS#8 key as a PEM key store read on the executor, SCRAM as a JAAS line. Both
witnesses after the commit; no secret in what the test process printed (Spark's and Kafka's
logs included).
"""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from airflow_provider_kafka2pc.errors import PrepareError
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.spark import prepare_dataframe
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from tests.conftest import assert_exactly_once, audit, unique_id
from tests.support.secure import TLS_PRINCIPAL
from tests.support.spark import local_session

ROWS = 2000


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    yield from local_session()


def login(secure_broker, how: str) -> tuple[str, dict[str, str], list[str]]:
    """(principal, settings, the secrets in them) for mutual TLS or SCRAM over SASL_SSL."""
    if how == "mutual-tls":
        settings = secure_broker.tls()
        return f"User:{TLS_PRINCIPAL}", settings, [secure_broker.tls_client.key_password]
    return (
        "User:export-a",
        secure_broker.sasl_ssl("export-a"),
        [secure_broker.passwords["export-a"]],
    )


@pytest.mark.parametrize("how", ["mutual-tls", "sasl-ssl"])
def test_jvm_writer_prepares_over_tls_and_sasl_with_only_the_exports_acls(
    secure_broker, spark, how, capfd
):
    principal, settings, secrets = login(secure_broker, how)
    topic = secure_broker.create_topic(2)
    prefix = unique_id("jvm")
    secure_broker.grant_export(principal, prefix, topic)
    batch = prepare_dataframe(
        spark.range(ROWS).selectExpr("id", "concat('v-', id) AS v"),
        topic=topic,
        transactional_ids=[f"{prefix}-0", f"{prefix}-1"],
        producer_config=settings,
        key_column="id",
        writer="jvm",
    )
    assert batch.source_rows == ROWS and batch.metadata["writer"] == "jvm"
    with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
        assert audit(protocol, topic, *batch.committables).totals["open"] == ROWS
        ended = TransactionController(protocol).commit_all(batch.committables)
        assert {r.outcome for r in ended} == {Outcome.COMMITTED}
        assert_exactly_once(
            protocol, settings, topic, *batch.committables, committed=ROWS, aborted=0
        )
    out, err = capfd.readouterr()
    for secret in secrets:
        assert secret not in out + err


def test_jvm_writer_refused_an_id_outside_the_exports_prefix_leaves_nothing_open(
    secure_broker, spark
):
    """The export's ACLs cover its own id prefix only: a transactional id outside it is
    refused by the broker at initTransactions, the job fails, and nothing is left open."""
    principal, settings, _ = login(secure_broker, "sasl-ssl")
    topic = secure_broker.create_topic(2)
    prefix = unique_id("jvm")
    secure_broker.grant_export(principal, prefix, topic)
    with pytest.raises(PrepareError, match="abort \\(fence\\) this run's ids"):
        prepare_dataframe(
            spark.range(100).selectExpr("id"),
            topic=topic,
            transactional_ids=[f"{unique_id('other')}-0"],
            producer_config=settings,
            key_column="id",
            writer="jvm",
        )
    with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
        report = audit(protocol, topic)
    assert report.totals["open"] == report.totals["committed"] == 0, report.to_dict()
