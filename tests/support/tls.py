"""TLS material made at test time: a CA, broker and client certificates, as PEM files.

Made with ``cryptography`` (installed with Airflow), EC P-256 keys (fast to make, read by
OpenSSL, Python's ssl module and Java alike). The broker gets one PEM keystore (its
private key, unencrypted, then its certificate and the CA's) and the CA as a PEM
truststore (``ssl.keystore.type=PEM``, ``ssl.truststore.type=PEM``). A client's private
key is encrypted with a password (``ssl.key.password``): a secret that must reach every
client through the ``kafka`` connection's extra and show nowhere else.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from devtools.broker.node import HOST, BrokerTls

_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Authority:
    """A certificate authority: its certificate file, and what signs with it."""

    name: str
    cert_path: Path
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


@dataclass(frozen=True)
class ClientFiles:
    """What a client's ``kafka`` connection extra points at."""

    ca: Path
    certificate: Path
    key: Path
    key_password: str
    common_name: str

    def settings(self, bootstrap: str, protocol: str = "SSL") -> dict[str, str]:
        """librdkafka-style settings: mutual TLS with an encrypted client key."""
        return {
            "bootstrap.servers": bootstrap,
            "security.protocol": protocol,
            "ssl.ca.location": str(self.ca),
            "ssl.certificate.location": str(self.certificate),
            "ssl.key.location": str(self.key),
            "ssl.key.password": self.key_password,
        }


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kafka2pc tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _private(path: Path, data: bytes) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return path


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_ca(directory: Path, name: str = "kafka2pc test CA") -> Authority:
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _DAY)
        .not_valid_after(now + 30 * _DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    slug = name.replace(" ", "-").lower()
    path = directory / f"{slug}.pem"
    path.write_bytes(_pem(cert))
    return Authority(name, path, key, cert)


def _issue(
    ca: Authority,
    common_name: str,
    *,
    hosts: tuple[str, ...] = (),
    server: bool = False,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + (
        [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _DAY)
        .not_valid_after(now + 30 * _DAY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, builder.sign(ca.key, hashes.SHA256())


def broker_tls(
    ca: Authority,
    directory: Path,
    *,
    hosts: tuple[str, ...] = (HOST,),
    client_auth: str = "required",
) -> BrokerTls:
    """The broker's PEM keystore (key + chain) for ``hosts`` and the CA as its truststore.

    Loopback is ``127.0.0.1`` only: a client that bootstraps from ``localhost`` meets a
    certificate that does not name it (the wrong-host-name test).
    """
    key, cert = _issue(ca, "kafka2pc broker", hosts=hosts, server=True)
    keystore = _private(
        directory / "broker-keystore.pem",
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        + _pem(cert)
        + _pem(ca.cert),
    )
    return BrokerTls(keystore=keystore, truststore=ca.cert_path, client_auth=client_auth)


def client_files(ca: Authority, directory: Path, common_name: str) -> ClientFiles:
    """A client certificate signed by ``ca`` and its key, encrypted with a fresh password."""
    key, cert = _issue(ca, common_name)
    password = "tls-" + uuid.uuid4().hex
    slug = common_name.replace(" ", "-")
    key_path = _private(
        directory / f"{slug}.key.pem",
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(password.encode()),
        ),
    )
    cert_path = directory / f"{slug}.cert.pem"
    cert_path.write_bytes(_pem(cert))
    return ClientFiles(ca.cert_path, cert_path, key_path, password, common_name)
