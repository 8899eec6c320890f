"""librdkafka-style settings as Kafka's Java producer spells them, for the JVM writer.

Users configure Kafka once, the way confluent-kafka spells it (``connection.settings``);
the JVM writer runs Kafka's own Java producer, whose names differ. The translation is
checked on the driver before any transaction opens: a setting it cannot map is refused by
name (never by value: a misspelt secret key must not show its secret).

TLS files stay paths, read where the producer runs (on the executor), as librdkafka reads
them: the CA as a PEM trust store, the client certificate and its key, read by the
executor into the Java client's PEM key store (``ssl.keystore.certificate.chain`` and
``ssl.keystore.key``; the key PKCS#8, as Java requires). One exception, measured on Java
17: the JDK cannot decrypt a PBES2-encrypted PKCS#8 key (what OpenSSL and Python's
``cryptography`` write: "PBES2 SecretKeyFactory not available"), so an encrypted key is
decrypted here on the driver with ``ssl.key.password`` and travels, like the password
itself, inside the write job's function object only (never on disk, never in the plan).

SASL PLAIN and SCRAM become a ``sasl.jaas.config`` line, which the Java client treats as a
password (``[hidden]`` in its own logs).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import defaults
from ..connection.settings import bootstrap_servers
from ..errors import ConfigurationError

#: Where the executor finds the client certificate and key files (see the module text).
CERTIFICATE_FILE = "kafka2pc.ssl.certificate.location"
KEY_FILE = "kafka2pc.ssl.key.location"

#: Same name, same meaning in both clients.
_SAME = frozenset(
    {
        "client.id",
        "linger.ms",
        "batch.size",
        "request.timeout.ms",
        "retry.backoff.ms",
        "retry.backoff.max.ms",
        "socket.connection.setup.timeout.ms",
        "ssl.key.password",
        "max.in.flight.requests.per.connection",
        "sasl.mechanism",
    }
)
#: The Java producer's batch size unless set: librdkafka's default ``batch.size``.
JAVA_BATCH_BYTES = 1_000_000
#: The Java clients' first retry backoff unless set (Java's default: 100 ms). Why: the
#: producer's ``initTransactions()`` finds its coordinator first and then sends
#: InitProducerId as a retry, after sleeping one backoff; every transaction paid 100 ms
#: to open, 110-170 ms of a task writing 250,000 rows in 0.6 s (docs/performance-startup.md).
#: Backoffs still grow exponentially up to ``retry.backoff.max.ms`` (1 s), so a broker
#: failover is retried about as often as with Java's default.
JAVA_RETRY_BACKOFF_MS = 10
#: librdkafka settings the JVM writer ignores, as they do not change what is written.
_IGNORED = frozenset({"allow.auto.create.topics", "statistics.interval.ms", "logger"})
_COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: Partitioners whose keyed placement is Java's own (murmur2); keyless records are spread
#: by Java's sticky partitioner instead of at random, which changes no guarantee.
_MURMUR2 = ("murmur2", "murmur2_random")
#: Set by the writer itself: a caller's value would break the protocol.
_RESERVED = (
    "transactional.id",
    "transaction.timeout.ms",
    "enable.idempotence",
    "acks",
)


def java_producer_settings(
    config: Mapping[str, Any], transaction_timeout_ms: int
) -> dict[str, str]:
    """The Java producer's settings for ``config``; :class:`ConfigurationError` naming
    every setting that cannot be mapped (the writer adds the transactional ones)."""
    out = {"bootstrap.servers": bootstrap_servers(config)}
    refused = sorted(k for k in config if k in _RESERVED or callable(config[k]))
    unknown = []
    for key, value in config.items():
        if key == "bootstrap.servers" or key in _IGNORED or key in refused:
            continue
        if key in _SAME:
            out[key] = str(value)
        elif key in ("compression.type", "compression.codec"):
            out["compression.type"] = _compression(value)
        elif key == "sasl.mechanisms":
            out["sasl.mechanism"] = str(value)
        elif key == "security.protocol":
            out[key] = _security_protocol(value)
        elif key == "partitioner":
            if value not in _MURMUR2:
                raise ConfigurationError(
                    f"setting 'partitioner' is {value!r}: the JVM writer partitions keys with "
                    f"Java's murmur2 only (one of {_MURMUR2})"
                )
        elif key == "ssl.endpoint.identification.algorithm":
            out[key] = "" if str(value).lower() == "none" else str(value)
        elif key in ("ssl.ca.location", "ssl.ca.pem"):
            out["ssl.truststore.type"] = "PEM"
            trust = "location" if key.endswith("location") else "certificates"
            out[f"ssl.truststore.{trust}"] = str(value)
        elif key == "ssl.certificate.location":
            out[CERTIFICATE_FILE] = str(value)
        elif key == "ssl.key.location":
            out[KEY_FILE] = str(value)
        elif key in ("ssl.certificate.pem", "ssl.key.pem"):
            out["ssl.keystore.type"] = "PEM"
            name = "ssl.keystore.certificate.chain" if "certificate" in key else "ssl.keystore.key"
            out[name] = str(value)
        elif key in ("sasl.username", "sasl.password", "message.timeout.ms", "delivery.timeout.ms"):
            continue  # below
        else:
            unknown.append(key)
    if refused:
        raise ConfigurationError(f"setting(s) {refused} are managed by the writer")
    if unknown:
        raise ConfigurationError(
            f"setting(s) {sorted(unknown)} have no equivalent the JVM writer knows; remove "
            "them or use writer='python'"
        )
    if KEY_FILE in out and CERTIFICATE_FILE not in out:
        raise ConfigurationError("ssl.key.location is set without ssl.certificate.location")
    _decrypt_key(out)
    _sasl(config, out)
    _timeouts(config, out, transaction_timeout_ms)
    # librdkafka's default batch (1 MB), not Java's 16 KB: a transaction here writes one
    # partition (aligned) or a few, and Java's default cut a 2M-row export into batches of
    # about 100 records, doubling the broker's CPU (docs/performance.md). A setting wins.
    out.setdefault("batch.size", str(JAVA_BATCH_BYTES))
    out.setdefault("retry.backoff.ms", str(JAVA_RETRY_BACKOFF_MS))
    return out


def _decrypt_key(out: dict[str, str]) -> None:
    """An encrypted client key file, decrypted for a JDK that cannot (see the module text)."""
    path = out.get(KEY_FILE)
    if path is None:
        return
    try:
        data = Path(path).read_bytes()
    except OSError:
        return  # not on the driver: the executor reads it as it is
    if b"ENCRYPTED" not in data:
        return
    from cryptography.hazmat.primitives import serialization

    password = out.pop("ssl.key.password", None)
    try:
        key = serialization.load_pem_private_key(data, password.encode() if password else None)
    except (ValueError, TypeError):
        raise ConfigurationError(
            f"ssl.key.password does not decrypt the client key ssl.key.location {path}"
        ) from None
    out["ssl.keystore.key"] = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def _compression(value: Any) -> str:
    name = str(value).lower()
    if name not in _COMPRESSION:
        raise ConfigurationError(f"setting 'compression.type' is {value!r}; one of {_COMPRESSION}")
    return name


def _security_protocol(value: Any) -> str:
    protocol = str(value).upper()
    if protocol not in _SECURITY_PROTOCOLS:
        raise ConfigurationError(
            f"setting 'security.protocol' is {protocol!r}; supported: "
            f"{', '.join(_SECURITY_PROTOCOLS)}"
        )
    return protocol


def _sasl(config: Mapping[str, Any], out: dict[str, str]) -> None:
    """SASL user and password as the Java client's JAAS line."""
    if not out.get("security.protocol", "").startswith("SASL"):
        return
    mechanism = out.setdefault("sasl.mechanism", "GSSAPI").upper()
    out["sasl.mechanism"] = mechanism
    module = _LOGIN_MODULES.get(mechanism)
    if module is None:
        raise ConfigurationError(
            f"setting 'sasl.mechanism' is {mechanism!r}; the JVM writer supports "
            f"{', '.join(_LOGIN_MODULES)}"
        )
    user, password = config.get("sasl.username"), config.get("sasl.password")
    if not isinstance(user, str) or not isinstance(password, str):
        raise ConfigurationError(f"SASL {mechanism} needs sasl.username and sasl.password")
    out["sasl.jaas.config"] = (
        f'{module} required username="{_jaas(user)}" password="{_jaas(password)}";'
    )


def _jaas(text: str) -> str:
    """A JAAS quoted string (Kafka's parser honours backslash escapes)."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _timeouts(config: Mapping[str, Any], out: dict[str, str], transaction_timeout_ms: int) -> None:
    """The Python writer's delivery bound, which Java requires to be at least
    ``linger.ms + request.timeout.ms``: at most half the transaction timeout, so a failed
    write leaves its transaction time to be aborted."""
    most = max(1, transaction_timeout_ms // 2)
    given = config.get("delivery.timeout.ms", config.get("message.timeout.ms"))
    try:
        delivery = min(defaults.DELIVERY_TIMEOUT_MS, most) if given is None else int(given)
        linger = int(out.get("linger.ms", 5))
    except (TypeError, ValueError):
        raise ConfigurationError(
            "message.timeout.ms and linger.ms must be integers of milliseconds"
        ) from None
    if not 0 < delivery <= most:
        raise ConfigurationError(
            f"message.timeout.ms {delivery} must be positive and at most half the "
            f"transaction timeout ({most} of {transaction_timeout_ms} ms)"
        )
    request = int(out.get("request.timeout.ms", min(defaults.REQUEST_TIMEOUT_MS, delivery)))
    request = min(request, max(1, delivery - linger))
    if delivery < linger + request:
        raise ConfigurationError(
            f"message.timeout.ms {delivery} must exceed linger.ms {linger} (Java's rule)"
        )
    out["linger.ms"] = str(linger)
    out["request.timeout.ms"] = str(request)
    out["delivery.timeout.ms"] = str(delivery)
    # Bounds initTransactions, a full buffer and the abort, as the Python writer's timeout_s.
    out.setdefault("max.block.ms", str(defaults.REQUEST_TIMEOUT_MS))
