"""librdkafka-style settings translated for the JVM writer's Java producer, refused by name.

The translation's effect on a real broker (TLS, SASL, ACLs) is proven by
tests/integration/test_jvm_writer_secure.py; here: what maps to what, and that no refusal
shows a value.
"""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from airflow_provider_kafka2pc.errors import ConfigurationError
from airflow_provider_kafka2pc.spark.jvm_settings import (
    CERTIFICATE_FILE,
    KEY_FILE,
    java_producer_settings,
)
from airflow_provider_kafka2pc.spark.writers import check_writer

BOOTSTRAP = {"bootstrap.servers": "broker:9092"}
SASL_PLAIN = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}
TIMEOUT_MS = 900_000


def test_plain_settings_get_the_python_writers_delivery_bound():
    java = java_producer_settings(
        {
            **BOOTSTRAP,
            "linger.ms": 20,
            "compression.codec": "ZSTD",
            "partitioner": "murmur2_random",
        },
        TIMEOUT_MS,
    )
    assert java == {
        "bootstrap.servers": "broker:9092",
        "linger.ms": "20",
        "compression.type": "zstd",
        "delivery.timeout.ms": "60000",
        "request.timeout.ms": "30000",
        "max.block.ms": "30000",
        "batch.size": "1000000",  # librdkafka's default, not Java's 16 KB
        "retry.backoff.ms": "10",  # initTransactions sleeps one backoff: not Java's 100 ms
    }
    assert (
        java_producer_settings({**BOOTSTRAP, "batch.size": 65536}, TIMEOUT_MS)["batch.size"]
        == "65536"
    )
    backoff = {**BOOTSTRAP, "retry.backoff.ms": 250, "retry.backoff.max.ms": 5000}
    assert java_producer_settings(backoff, TIMEOUT_MS)["retry.backoff.ms"] == "250"
    assert java_producer_settings(backoff, TIMEOUT_MS)["retry.backoff.max.ms"] == "5000"


def test_a_short_transaction_timeout_bounds_delivery_as_java_requires():
    java = java_producer_settings(BOOTSTRAP, 10_000)
    delivery, request, linger = (
        int(java[k]) for k in ("delivery.timeout.ms", "request.timeout.ms", "linger.ms")
    )
    assert delivery == 5000 and delivery >= linger + request


def test_scram_over_tls_becomes_a_jaas_line_and_a_pem_trust_store():
    java = java_producer_settings(
        {
            **BOOTSTRAP,
            "security.protocol": "sasl_ssl",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "export-a",
            "sasl.password": 'pa"ss\\word',
            "ssl.ca.location": "/etc/ca.pem",
            "ssl.endpoint.identification.algorithm": "none",
        },
        TIMEOUT_MS,
    )
    assert java["security.protocol"] == "SASL_SSL"
    assert java["sasl.mechanism"] == "SCRAM-SHA-512"
    assert java["sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="export-a" password="pa\\"ss\\\\word";'
    )
    assert java["ssl.truststore.type"] == "PEM"
    assert java["ssl.truststore.location"] == "/etc/ca.pem"
    assert java["ssl.endpoint.identification.algorithm"] == ""
    assert "sasl.password" not in java and "sasl.username" not in java


def test_sasl_settings_on_a_plaintext_listener_are_ignored_as_librdkafka_does():
    java = java_producer_settings({**BOOTSTRAP, "sasl.password": "x"}, TIMEOUT_MS)
    assert "sasl.jaas.config" not in java


def test_an_encrypted_client_key_is_decrypted_on_the_driver(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / "client.key"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"k3y-pass"),
        )
    )
    settings = {
        **BOOTSTRAP,
        "security.protocol": "SSL",
        "ssl.certificate.location": "/etc/client.pem",
        "ssl.key.location": str(path),
        "ssl.key.password": "k3y-pass",
    }
    java = java_producer_settings(settings, TIMEOUT_MS)
    assert java[CERTIFICATE_FILE] == "/etc/client.pem" and java[KEY_FILE] == str(path)
    assert java["ssl.keystore.key"].startswith("-----BEGIN PRIVATE KEY-----")
    assert "ssl.key.password" not in java  # the key it opened is no longer encrypted
    with pytest.raises(ConfigurationError, match="does not decrypt") as refused:
        java_producer_settings({**settings, "ssl.key.password": "wrong-pass"}, TIMEOUT_MS)
    assert "wrong-pass" not in str(refused.value)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"transactional.id": "x"}, "managed by the writer"),
        ({"acks": "1"}, "managed by the writer"),
        ({"sasl.pasword": "s3cr3t-value"}, "sasl.pasword"),
        ({"partitioner": "consistent_random"}, "murmur2"),
        ({"compression.type": "brotli"}, "compression.type"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "GSSAPI"),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "u",
            },
            "sasl.password",
        ),
        ({"message.timeout.ms": 600_000}, "at most half the transaction timeout"),
        ({"ssl.key.location": "/k.pem"}, "without ssl.certificate.location"),
        ({"error_cb": print}, "managed by the writer"),
    ],
)
def test_what_cannot_be_mapped_is_refused_by_name_never_by_value(extra, named):
    with pytest.raises(ConfigurationError, match=named) as refused:
        java_producer_settings({**BOOTSTRAP, **extra}, TIMEOUT_MS)
    assert "s3cr3t-value" not in str(refused.value)


def test_the_writer_is_python_or_jvm():
    assert check_writer("jvm") == "jvm"
    with pytest.raises(ConfigurationError, match="writer must be one of"):
        check_writer("scala")
