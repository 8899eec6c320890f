"""One Apache Kafka broker as a secured deployment runs it: TLS, SASL, and ACLs enforced.

- listeners: SSL (mutual TLS required; a client's principal is its certificate's CN),
  SASL_SSL and SASL_PLAINTEXT (SCRAM-SHA-512), and PLAINTEXT for the broker's own
  inter-broker and controller traffic (principal ``User:ANONYMOUS``);
- the KRaft ``StandardAuthorizer``; super users: ``User:admin`` (SASL) and
  ``User:ANONYMOUS`` (the broker itself: its controller listener is PLAINTEXT). No
  ``allow.everyone.if.no.acl.found``: a principal without an ACL may do nothing;
- a CA made at test time signs the broker's certificate (for ``127.0.0.1`` only) and the
  client certificate of ``export-tls``, whose key is encrypted with a password.

Tests give the export principals only the SSL, SASL_SSL or SASL_PLAINTEXT listener; the
PLAINTEXT listener is the broker's own (a super user, like an operator's console).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_provider_kafka2pc.connection.acls import AclEntry, apply_acls, export_acls
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from devtools.broker import KafkaBroker

from .tls import Authority, ClientFiles, broker_tls, client_files, make_ca

ADMIN = "admin"
#: The mutual-TLS export principal: the CN of its client certificate.
TLS_PRINCIPAL = "export-tls"
SCRAM_USERS = (ADMIN, "export-a", "export-b", "probe", "refused")
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": f"User:{ADMIN};User:ANONYMOUS",
}


@dataclass
class SecureBroker:
    broker: KafkaBroker
    ca: Authority
    #: A CA that signed nothing the broker presents.
    wrong_ca: Authority
    tls_client: ClientFiles
    passwords: dict[str, str]

    @property
    def internal(self) -> dict[str, Any]:
        """The broker's own PLAINTEXT listener (a super user): set-up only."""
        return {"bootstrap.servers": self.broker.bootstrap_servers}

    def tls(self, *, ca: Path | None = None, host: str | None = None) -> dict[str, str]:
        """``export-tls`` over mutual TLS; ``host`` replaces 127.0.0.1 (the name the
        broker's certificate holds), ``ca`` the CA file."""
        settings = self.tls_client.settings(self.broker.ssl_bootstrap_servers)
        if ca is not None:
            settings["ssl.ca.location"] = str(ca)
        if host is not None:
            settings["bootstrap.servers"] = settings["bootstrap.servers"].replace("127.0.0.1", host)
        return settings

    def sasl_ssl(self, user: str) -> dict[str, str]:
        return {
            "bootstrap.servers": self.broker.sasl_ssl_bootstrap_servers,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.ca.cert_path),
            "sasl.mechanism": KafkaBroker.SASL_MECHANISM,
            "sasl.username": user,
            "sasl.password": self.passwords[user],
        }

    def sasl(self, user: str) -> dict[str, str]:
        return self.broker.sasl_settings(user)

    @property
    def admin(self) -> dict[str, str]:
        """``User:admin`` over SASL_SSL: the super user a deployment's operator would be."""
        return self.sasl_ssl(ADMIN)

    def create_topic(self, partitions: int = 2, name: str | None = None) -> str:
        topic = name or f"sec-{uuid.uuid4().hex[:10]}"
        with KafkaProtocol(self.internal, timeout_ms=10_000) as protocol:
            protocol.create_topic(topic, partitions)
        return topic

    def grant_export(self, principal: str, id_prefix: str, *topics: str) -> list[AclEntry]:
        """``kafka2pc acls --apply``'s work, as ``User:admin`` over SASL_SSL; waits until
        the principal's ACLs serve (KRaft propagates them through the metadata log)."""
        entries = apply_acls(self.admin, export_acls(principal, id_prefix, list(topics)))
        time.sleep(0.5)
        return entries


def start_secure_broker(directory: Path, config: dict[str, str]) -> SecureBroker:
    ca = make_ca(directory / "ca")
    wrong_ca = make_ca(directory / "wrong-ca", "some other CA")
    tls = broker_tls(ca, directory / "ca")
    client = client_files(ca, directory / "ca", TLS_PRINCIPAL)
    passwords = {user: f"{user}-{uuid.uuid4().hex}" for user in SCRAM_USERS}
    broker = KafkaBroker(
        "4.4.0",
        data_dir=directory / "kafka",
        config={**config, **AUTHORIZER},
        sasl_users=passwords,
        tls=tls,
    )
    broker.start()
    return SecureBroker(broker, ca, wrong_ca, client, passwords)
