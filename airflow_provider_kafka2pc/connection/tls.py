"""TLS, checked before anything is opened: a handshake that fails says why, by setting.

Neither client library says it: librdkafka logs "SSL handshake failed" and then times out
like an unreachable broker, kafka-python just times out. So before a control-plane
connection or a Spark job starts on an ``SSL``/``SASL_SSL`` setting, :func:`check_tls`
makes one handshake the way both clients would (the CA of ``ssl.ca.location``, host name
verification unless ``ssl.endpoint.identification.algorithm=none``, the client
certificate and its encrypted key) and sends one ApiVersions request through it, which
a broker that refuses the client certificate answers with a TLS alert. A failure raises
:class:`~airflow_provider_kafka2pc.errors.TlsError` naming the TLS problem and the
setting to change, before any transaction is opened. No secret reaches the message:
``ssl.key.password`` is only handed to OpenSSL.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import struct
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..errors import TlsError
from .settings import bootstrap_servers

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
#: OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH / X509_V_ERR_IP_ADDRESS_MISMATCH.
_NAME_MISMATCH = (62, 64)
#: ApiVersions v0, correlation id 1, client id "kafka2pc-tls-check".
_CLIENT_ID = b"kafka2pc-tls-check"
_API_VERSIONS = struct.pack(">hhih", 18, 0, 1, len(_CLIENT_ID)) + _CLIENT_ID
_API_VERSIONS_REQUEST = struct.pack(">i", len(_API_VERSIONS)) + _API_VERSIONS


def uses_tls(config: Mapping[str, Any]) -> bool:
    return str(config.get("security.protocol", "PLAINTEXT")).upper() in TLS_PROTOCOLS


def check_tls(config: Mapping[str, Any], timeout_s: float = 10.0) -> None:
    """Raise :class:`TlsError` if a TLS handshake with the bootstrap servers fails.

    Does nothing for settings without TLS, and when no server is reachable at all (the
    client's own "unreachable" error then says so). The first server that completes a
    handshake ends the check.
    """
    problem = tls_problem(config, timeout_s)
    if problem is not None:
        raise TlsError(problem)


def tls_problem(config: Mapping[str, Any], timeout_s: float = 10.0) -> str | None:
    """Why TLS with these settings fails, as a sentence; None when it works or cannot
    be tried (no TLS in the settings, no server reachable)."""
    if not uses_tls(config):
        return None
    servers = [s.strip() for s in bootstrap_servers(config).split(",") if s.strip()]
    with _context(config) as (context, problem):
        if problem is not None:
            return problem
        first: str | None = None
        for server in servers:
            outcome = _try(server, context, config, timeout_s)
            if outcome == "":
                return None
            first = first or outcome
        return first


# -- the context, as the clients build it ----------------------------------------------------


@contextlib.contextmanager
def _context(config: Mapping[str, Any]) -> Iterator[tuple[ssl.SSLContext, str | None]]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = _verifies_host(config)
    context.verify_mode = ssl.CERT_REQUIRED
    with _pem_files(config) as files:
        ca, cert, key = files
        try:
            if ca is not None:
                if Path(ca).is_dir():
                    context.load_verify_locations(capath=ca)
                else:
                    context.load_verify_locations(cafile=ca)
            else:
                context.load_default_certs()
        except FileNotFoundError:
            yield context, f"ssl.ca.location {ca}: no such file"
            return
        except (ssl.SSLError, OSError) as exc:
            yield context, f"ssl.ca.location {ca} holds no usable CA certificate ({_reason(exc)})"
            return
        if cert is not None or key is not None:
            problem = _load_client_certificate(context, config, cert, key)
            if problem is not None:
                yield context, problem
                return
        yield context, None


def _verifies_host(config: Mapping[str, Any]) -> bool:
    return str(config.get("ssl.endpoint.identification.algorithm", "https")).lower() != "none"


def _load_client_certificate(
    context: ssl.SSLContext, config: Mapping[str, Any], cert: str | None, key: str | None
) -> str | None:
    if cert is None:
        return "ssl.key.location is set without ssl.certificate.location"
    for name, path in (("ssl.certificate.location", cert), ("ssl.key.location", key)):
        if path is not None and not Path(path).is_file():
            return f"{name} {path}: no such file"
    password = config.get("ssl.key.password")
    try:
        context.load_cert_chain(cert, key, password=password or None)
    except ssl.SSLError as exc:
        reason = _reason(exc)
        if "bad decrypt" in reason.lower() or "BAD_DECRYPT" in reason:
            return f"ssl.key.password does not decrypt the client key ssl.key.location {key}"
        if "KEY_VALUES_MISMATCH" in reason or "key values mismatch" in reason.lower():
            return (
                f"the client key ssl.key.location {key} does not belong to the certificate "
                f"ssl.certificate.location {cert}"
            )
        if _encrypted(key or cert):
            return (
                f"the client key ssl.key.location {key or cert} is encrypted and "
                "ssl.key.password does not decrypt it"
            )
        return f"the client certificate {cert} or its key {key} is unusable ({reason})"
    except TypeError:
        return "ssl.key.password must be a string"
    return None


def _encrypted(path: str) -> bool:
    try:
        return "ENCRYPTED" in Path(path).read_text(errors="replace")
    except OSError:
        return False


@contextlib.contextmanager
def _pem_files(config: Mapping[str, Any]) -> Iterator[tuple[str | None, str | None, str | None]]:
    """The CA, certificate and key as file paths: ``*.location`` as given, inline
    ``*.pem`` values in private temporary files (removed afterwards)."""
    with tempfile.TemporaryDirectory(prefix="kafka2pc-tls-") as directory:
        paths: list[str | None] = []
        for name in ("ca", "certificate", "key"):
            location = config.get(f"ssl.{name}.location")
            inline = config.get(f"ssl.{name}.pem")
            if location:
                paths.append(str(location))
            elif inline:
                path = os.path.join(directory, f"{name}.pem")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as handle:
                    handle.write(str(inline))
                paths.append(path)
            else:
                paths.append(None)
        yield paths[0], paths[1], paths[2]


# -- one handshake ---------------------------------------------------------------------------


def _try(server: str, context: ssl.SSLContext, config: Mapping[str, Any], timeout_s: float) -> str:
    """Why TLS with ``server`` fails; empty when the handshake and one request worked,
    and when the server cannot be reached at all (not a TLS problem)."""
    host, _, port_text = server.rpartition(":")
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        return ""  # bootstrap.servers itself is wrong: the client names it
    try:
        raw = socket.create_connection((host, port), timeout=timeout_s)
    except OSError:
        return ""
    with raw:
        try:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                tls.sendall(_API_VERSIONS_REQUEST)
                if len(tls.recv(4)) < 4:
                    return (
                        f"the broker at {server} closed the TLS connection without answering: "
                        "it may require a client certificate (ssl.certificate.location, "
                        "ssl.key.location) or not speak TLS on this port"
                    )
        except ssl.SSLCertVerificationError as exc:
            return _verification_failed(server, host, port, exc, config, timeout_s)
        except ssl.SSLError as exc:
            return _refused(server, exc, has_certificate=bool(_client_certificate(config)))
        except TimeoutError:
            return (
                f"the TLS handshake with {server} did not finish within {timeout_s:.0f} s: is "
                "this port a TLS listener (security.protocol)?"
            )
        except OSError as exc:
            return (
                f"the broker at {server} dropped the TLS connection ({exc.__class__.__name__}): "
                "it may require a client certificate signed by a CA it trusts "
                "(ssl.certificate.location, ssl.key.location)"
            )
    return ""


def _verification_failed(
    server: str,
    host: str,
    port: int,
    exc: ssl.SSLCertVerificationError,
    config: Mapping[str, Any],
    timeout_s: float,
) -> str:
    presented = _presented(host, port, timeout_s)
    if exc.verify_code in _NAME_MISMATCH:
        names = ", ".join(presented.get("names", [])) or "no names"
        return (
            f"TLS host name verification failed for {server}: the broker's certificate "
            f"does not name {host!r} (it names {names}). Connect by a name the certificate "
            "holds in bootstrap.servers and in the brokers' advertised.listeners, or have the "
            "certificate reissued; ssl.endpoint.identification.algorithm=none turns the "
            "check off (not advised)"
        )
    ca = config.get("ssl.ca.location") or (
        "ssl.ca.pem" if config.get("ssl.ca.pem") else "the system's CA store"
    )
    issuer = presented.get("issuer")
    issued = f", issued by {issuer}," if issuer else ""
    return (
        f"TLS certificate verification failed for {server}: {exc.verify_message} "
        f"(the broker's certificate{issued} does not chain to a CA in {ca}). Set "
        "ssl.ca.location to the CA that signed the brokers' certificates"
    )


def _client_certificate(config: Mapping[str, Any]) -> Any:
    return config.get("ssl.certificate.location") or config.get("ssl.certificate.pem")


def _refused(server: str, exc: ssl.SSLError, *, has_certificate: bool) -> str:
    reason = _reason(exc)
    lowered = reason.lower().replace("_", " ")
    refused_certificate = any(
        words in lowered for words in ("unknown ca", "bad certificate", "certificate unknown")
    )
    if "certificate required" in lowered or (refused_certificate and not has_certificate):
        return (
            f"the broker at {server} requires a client certificate (mutual TLS): set "
            "ssl.certificate.location and ssl.key.location (and ssl.key.password for an "
            f"encrypted key) [{reason}]"
        )
    if refused_certificate:
        return (
            f"the broker at {server} refused the client certificate ({reason}): it must be "
            "signed by a CA in the broker's truststore (ssl.certificate.location)"
        )
    if any(w in lowered for w in ("wrong version number", "record layer", "packet length")):
        return (
            f"the listener at {server} does not speak TLS ({reason}): check security.protocol "
            "and the port in bootstrap.servers"
        )
    if "unexpected eof" in lowered:
        return (
            f"the broker at {server} closed the connection during the TLS handshake "
            f"({reason}): is this port a TLS listener? Check security.protocol and the port "
            "in bootstrap.servers"
        )
    return f"the TLS handshake with {server} failed ({reason})"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or exc.strerror or str(exc)
    return getattr(exc, "strerror", None) or str(exc)


def _presented(host: str, port: int, timeout_s: float) -> dict[str, Any]:
    """What the broker presents (names, issuer), read without verifying it: only to say
    what is wrong. Empty when it cannot be read or ``cryptography`` is missing."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host, port), timeout=timeout_s) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError):
        return {}
    if not der:
        return {}
    try:
        from cryptography import x509
    except ImportError:
        return {}
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError:
        return {}
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [f"IP {ip}" for ip in sans.get_values_for_type(x509.IPAddress)]
        names += [f"DNS {dns}" for dns in sans.get_values_for_type(x509.DNSName)]
    except x509.ExtensionNotFound:
        names = []
    return {"names": names, "issuer": cert.issuer.rfc4514_string()}
