"""Connection settings: one librdkafka-style mapping serves both clients.

Users configure Kafka the way confluent-kafka (librdkafka) spells it; the control
plane (kafka-python) needs other names. The translation lives here, and so does the
redaction that keeps secrets out of log lines and error messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import ConfigurationError

_SECRET_MARKERS = ("password", "secret", "token", "sasl.jaas.config", "ssl.key.pem")

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


def bootstrap_servers(config: Mapping[str, Any]) -> str:
    servers = config.get("bootstrap.servers")
    if not isinstance(servers, str) or not servers.strip():
        raise ConfigurationError("setting 'bootstrap.servers' is required (host:port[,...])")
    return servers.strip()


def to_kafka_python(config: Mapping[str, Any]) -> dict[str, Any]:
    """Translate librdkafka-style settings for kafka-python; refuse what it cannot honour.

    Data-plane-only settings (linger.ms, compression, ...) are ignored: the control
    plane sends a handful of small requests.
    """
    out: dict[str, Any] = {"bootstrap_servers": bootstrap_servers(config).split(",")}
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
