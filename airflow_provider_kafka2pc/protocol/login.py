"""The SASL login, checked frame by frame when a connection fails: why a broker refuses it.

kafka-python 3.0.12 does not say (see :func:`sasl_refusal`); without this, a wrong password
reads as an unreachable broker.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

import kafka.errors as kafka_errors
from kafka.net.sasl import get_sasl_mechanism
from kafka.net.transport import KafkaSSLTransport
from kafka.protocol.parser import KafkaProtocol as FrameParser
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from .codes import error_name


def sasl_refusal(kp_config: Mapping[str, Any], timeout_s: float) -> str | None:
    """Why the first bootstrap server refuses this SASL login; None if it accepts it or
    cannot be asked.

    kafka-python 3.0.12 never says: the broker answers SaslAuthenticate with an error and
    closes the connection, the transport reads both in one go and drops the answer
    (kafka/net/transport.py, _sock_recv), so a refused login looks like an unreachable
    broker. One blocking exchange, frame by frame, reads the answer.
    """
    security = str(kp_config.get("security_protocol"))
    if not security.startswith("SASL"):
        return None
    host, _, port = kp_config["bootstrap_servers"][0].rpartition(":")
    mechanism = kp_config.get("sasl_mechanism", "PLAIN")
    parser = FrameParser(client_id="kafka2pc-login-check")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
            if security == "SASL_SSL":
                ssl_config = {**KafkaSSLTransport.DEFAULT_CONFIG}
                ssl_config.update({k: v for k, v in kp_config.items() if k in ssl_config})
                context = KafkaSSLTransport._build_ssl_context(ssl_config)
                sock = context.wrap_socket(sock, server_hostname=host)

            def call(request: Any) -> Any:
                parser.send_request(request)
                sock.sendall(parser.send_bytes())
                while True:
                    data = sock.recv(65536)
                    if not data:
                        raise ConnectionError("closed by the broker")
                    for _, response in parser.receive_bytes(data):
                        return response

            handshake = call(SaslHandshakeRequest(version=1, mechanism=mechanism))
            if handshake.error_code:
                return f"the broker offers {', '.join(handshake.mechanisms)} only"
            login = get_sasl_mechanism(mechanism)(host=host, **kp_config)
            while not login.is_done():
                answer = call(SaslAuthenticateRequest(version=1, auth_bytes=login.auth_bytes()))
                if answer.error_code:
                    return answer.error_message or error_name(answer.error_code)
                login.receive(answer.auth_bytes)
    except (OSError, ValueError, kafka_errors.KafkaError):
        return None
    return None
