"""Connection settings: one librdkafka-style mapping serves both clients.

Users configure Kafka the way confluent-kafka (librdkafka) spells it; the control
plane (kafka-python) needs other names. The translation lives here, and so does the
redaction that keeps secrets out of log lines and error messages.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigurationError

_SECRET_MARKERS = (
    "password",
    "passwd",
    "pwd",
    "secret",
    "token",
    "credential",
    "private",
    "sasl.jaas.config",
    "sasl.oauthbearer.config",
    "ssl.key.pem",
)

# librdkafka name -> kafka-python name, for the settings the control plane honours.
_TRANSLATION = {
    "bootstrap.servers": "bootstrap_servers",
    "client.id": "client_id",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.crl.location": "ssl_crlfile",
    "request.timeout.ms": "request_timeout_ms",
    "socket.connection.setup.timeout.ms": "socket_connection_setup_timeout_ms",
}
_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_INT_SETTINGS = ("request_timeout_ms", "socket_connection_setup_timeout_ms")


def is_secret(key: str) -> bool:
    return any(marker in key.lower() for marker in _SECRET_MARKERS)


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy safe to log: secret values replaced by ``***``."""
    return {k: ("***" if is_secret(k) else v) for k, v in config.items()}


#: Settings whose values are never secret.
_PUBLIC = frozenset(
    {
        "bootstrap.servers",
        "client.id",
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.endpoint.identification.algorithm",
    }
)


def redact_strictly(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy for error texts about settings that may be wrong: only :data:`_PUBLIC`
    values shown, so a misspelt secret key (``sasl.pasword``) cannot show its value."""
    return {k: (v if k in _PUBLIC else "***") for k, v in config.items()}


def secret_values(config: Mapping[str, Any]) -> set[str]:
    """The secrets among ``config``'s values, in the forms a text may show them in."""
    found = set()
    for key, value in config.items():
        if is_secret(key) and isinstance(value, str) and value:
            found.add(value)
            found.add(repr(value.encode())[2:-1])  # as inside a logged bytes repr
    return found


def scrub(text: str, config: Mapping[str, Any]) -> str:
    """``text`` with every secret value of ``config`` replaced by ``***``.

    For messages that quote what a client library said (librdkafka echoes invalid values).
    """
    for secret in sorted(secret_values(config), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


class _SecretScrubber(logging.Filter):
    """Replaces known secrets in kafka-python's DEBUG records.

    kafka-python 3.0.12 logs every request at DEBUG, SASL tokens included (a PLAIN token
    is the password in clear, once decoded and twice as raw frame bytes), and
    ``KafkaAdminClient`` logs its whole configuration, ``sasl_plain_password`` included.
    A filter on those loggers runs only for records that pass their level, so it costs
    nothing unless DEBUG logging is on.
    """

    def __init__(self) -> None:
        super().__init__("kafka2pc-secrets")
        self._secrets: set[str] = set()

    def add(self, secrets: set[str]) -> None:
        self._secrets |= secrets

    def filter(self, record: logging.LogRecord) -> bool:
        if self._secrets:
            message = record.getMessage()
            scrubbed = message
            for secret in sorted(self._secrets, key=len, reverse=True):
                scrubbed = scrubbed.replace(secret, "***")
            if scrubbed != message:
                record.msg, record.args = scrubbed, None
        return True


#: kafka-python loggers whose DEBUG records carry credentials.
_KAFKA_PYTHON_LOGGERS = ("kafka.admin.client", "kafka.net.connection", "kafka.protocol.parser")
_SCRUBBER = _SecretScrubber()


def _guard_kafka_python_logs(config: Mapping[str, Any]) -> None:
    secrets = secret_values(config)
    if not secrets:
        return
    _SCRUBBER.add(secrets)
    for name in _KAFKA_PYTHON_LOGGERS:
        logger = logging.getLogger(name)
        if _SCRUBBER not in logger.filters:
            logger.addFilter(_SCRUBBER)


def bootstrap_servers(config: Mapping[str, Any]) -> str:
    servers = config.get("bootstrap.servers")
    if not isinstance(servers, str) or not servers.strip():
        raise ConfigurationError("setting 'bootstrap.servers' is required (host:port[,...])")
    return servers.strip()


def to_kafka_python(config: Mapping[str, Any]) -> dict[str, Any]:
    """Translate librdkafka-style settings for kafka-python; refuse what it cannot honour.

    Data-plane-only settings (linger.ms, compression, ...) are ignored: the control
    plane sends a handful of small requests. The secrets are registered with a filter on
    kafka-python's loggers, which would otherwise print them at DEBUG.
    """
    out: dict[str, Any] = {"bootstrap_servers": bootstrap_servers(config).split(",")}
    _guard_kafka_python_logs(config)
    for key, value in config.items():
        target = _TRANSLATION.get(key)
        if target is None or target == "bootstrap_servers":
            continue
        out[target] = int(value) if target in _INT_SETTINGS else value
    protocol = str(out.get("security_protocol", "PLAINTEXT")).upper()
    if protocol not in _SECURITY_PROTOCOLS:
        raise ConfigurationError(
            f"setting 'security.protocol' is {protocol!r}; "
            f"supported: {', '.join(_SECURITY_PROTOCOLS)}"
        )
    out["security_protocol"] = protocol
    if "sasl_mechanism" in out:
        mechanism = str(out["sasl_mechanism"]).upper()
        if mechanism not in _SASL_MECHANISMS:
            raise ConfigurationError(
                f"setting 'sasl.mechanism' is {mechanism!r}; "
                f"supported: {', '.join(_SASL_MECHANISMS)}"
            )
        out["sasl_mechanism"] = mechanism
    if str(config.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        out["ssl_check_hostname"] = False
    return out
