"""The local Apache Kafka broker: fetched once, started, crashed, restarted, stopped."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from airflow_provider_kafka2pc.errors import (
    BrokerFetchError,
    BrokerUnreachableError,
    ConfigurationError,
    Kafka2pcError,
)
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from devtools.broker import (
    DEFAULT_KAFKA_VERSION,
    KafkaBroker,
    cache_root,
    fetch_kafka,
)
from devtools.broker.distribution import REPOSITORY_ENV
from tests.conftest import REAL_KAFKA_ENV
from tests.support.proxy import Mode, TcpProxy

pytestmark = pytest.mark.skipif(
    bool(os.environ.get(REAL_KAFKA_ENV)), reason="tests the local broker itself"
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cached_jars_are_reused():
    lib = fetch_kafka(DEFAULT_KAFKA_VERSION)
    assert lib.parent == cache_root() / f"kafka-{DEFAULT_KAFKA_VERSION}"
    assert (lib / f"kafka_2.13-{DEFAULT_KAFKA_VERSION}.jar").exists()
    assert fetch_kafka(DEFAULT_KAFKA_VERSION) == lib  # no second fetch: it returns at once


def test_unknown_version_names_version_and_cache_path(tmp_path: Path):
    with pytest.raises(BrokerFetchError) as failed:
        fetch_kafka("9.9.9", tmp_path)
    message = str(failed.value)
    assert "Apache Kafka 9.9.9" in message
    assert str(tmp_path / "kafka-9.9.9") in message
    assert "answers 404" in message
    assert not (tmp_path / "kafka-9.9.9").exists()  # nothing half-fetched left to be used


def test_unreachable_repository_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv(REPOSITORY_ENV, f"http://127.0.0.1:{port}/maven2/")
    with pytest.raises(BrokerFetchError, match="unreachable") as failed:
        fetch_kafka("4.3.1", tmp_path)
    assert "4.3.1" in str(failed.value) and str(tmp_path) in str(failed.value)


def test_malformed_version_is_refused_before_any_fetch(tmp_path: Path):
    with pytest.raises(ConfigurationError, match=r"of the form 4\.4\.0"):
        fetch_kafka("latest", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_crash_and_restart_on_the_same_data_keeps_address_and_topics(tmp_path: Path):
    broker = KafkaBroker(data_dir=tmp_path / "kafka").start()
    try:
        address, first_pid = broker.bootstrap_servers, broker.pid
        with KafkaProtocol({"bootstrap.servers": address}) as protocol:
            protocol.create_topic("survives", 3)
        broker.kill()  # kill -9: no clean shutdown
        assert not alive(first_pid)
        broker.restart()
        assert broker.bootstrap_servers == address and broker.pid != first_pid
        with KafkaProtocol({"bootstrap.servers": address}) as protocol:
            assert sorted(protocol.partition_leaders("survives")) == [0, 1, 2]
        assert "Kafka Server started" in broker.log_path.read_text()
    finally:
        broker.stop()
    assert not alive(first_pid)
    assert (tmp_path / "kafka" / "data" / "meta.properties").exists()  # data kept


def test_temporary_broker_stops_its_own_process_and_removes_its_directory():
    with KafkaBroker() as broker:
        pid, data_dir = broker.pid, broker.data_dir
        assert alive(pid)
    assert not alive(pid)
    assert not data_dir.exists()


def test_sasl_scram_listener_admits_the_right_password_only(tmp_path: Path):
    with KafkaBroker(data_dir=tmp_path / "kafka", sasl_users={"alice": "alice-pw-1"}) as broker:
        settings = broker.sasl_settings("alice")
        with KafkaProtocol(settings) as protocol:
            protocol.create_topic("secured", 1)
            assert list(protocol.partition_leaders("secured")) == [0]
        wrong = {**settings, "sasl.password": "not-it"}
        with pytest.raises(Kafka2pcError) as refused:
            KafkaProtocol(wrong, timeout_ms=3000)
        assert "not-it" not in str(refused.value)


def test_proxy_in_front_of_the_broker_can_drop_and_restore_it(tmp_path: Path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        proxy_port = sock.getsockname()[1]
    broker = KafkaBroker(data_dir=tmp_path / "kafka", advertised_port=proxy_port)
    with broker, TcpProxy(broker.port, port=proxy_port) as proxy:
        via_proxy = {"bootstrap.servers": f"127.0.0.1:{proxy.port}"}
        with KafkaProtocol(via_proxy) as protocol:
            protocol.create_topic("proxied", 2)
        proxy.set_mode(Mode.DROP)
        with pytest.raises(BrokerUnreachableError):
            KafkaProtocol(via_proxy, timeout_ms=2000)
        proxy.set_mode(Mode.PASS)
        with KafkaProtocol(via_proxy) as protocol:
            assert sorted(protocol.partition_leaders("proxied")) == [0, 1]
