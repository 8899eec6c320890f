"""Fixtures: one Apache Kafka broker per test session and version (or a cluster named by env)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.transaction.audit import AuditReport, audit_topic
from airflow_provider_kafka2pc.transaction.committable import Committable
from devtools.broker import DEFAULT_KAFKA_VERSION, KafkaBroker
from devtools.visible import Visible, read_committed

#: Point the suite at a running Apache Kafka cluster instead of the local broker.
REAL_KAFKA_ENV = "KAFKA2PC_TEST_BOOTSTRAP"
#: The newest 3.x: classic transactions only (EndTxn <= v4, no KIP-890).
CLASSIC_KAFKA_VERSION = "3.9.2"
BOTH_VERSIONS = (DEFAULT_KAFKA_VERSION, CLASSIC_KAFKA_VERSION)

#: Every JVM the tests start (brokers, spark-submit, Kafka's Java tools) compiles with C1 only:
#: they live seconds to minutes and move little data, so C2's compiler threads cost more CPU
#: than they save. Measured on the real-broker and spark-submit tests: 0.63x the CPU, 0.84x
#: the wall time. Two workers fill both cores, so CPU is what sets ``make test``'s time.
#: An option already set in the environment is kept.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")

#: Test brokers check for timed-out transactions every half second (default 10 s), so
#: a real transaction timeout of a few seconds is observed within a test.
TEST_BROKER_CONFIG = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    # A broker restarted after kill -9 waits for its old session to expire (9 s by default).
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "1000",
    # An idle test broker spent 3.5% of a core over 60 s, its request handlers and Raft I/O
    # thread the busiest (a broker per worker and version, and the secured one, live the
    # whole session). A no-op metadata record every 5 s (default 0.5 s) and a heartbeat
    # every 1 s: 2.6%. Failure detection still follows the 3 s session timeout.
    "metadata.max.idle.interval.ms": "5000",
}


#: Session fixtures that start servers of their own: the tests using one share a worker, so
#: ``make test``'s two workers start it once, not twice.
SHARED_SERVERS = ("cluster_session", "secure_broker")


def xdist_group(item: pytest.Item) -> str | None:
    """The pytest-xdist group keeping ``item`` with the tests it shares a costly fixture
    with: a shared server's, else its module's when the module builds fixtures once (a
    scheduler, a Spark session, a broker of its own)."""
    for name in SHARED_SERVERS:
        if name in item.fixturenames:
            return name
    module = item.nodeid.split("::")[0]
    fixtures = getattr(item, "_fixtureinfo", None)  # pytest's only record of fixture scopes
    for definitions in fixtures.name2fixturedefs.values() if fixtures else ():
        for definition in definitions:
            if definition.scope == "module" or (
                definition.scope != "function" and definition.baseid == module
            ):
                return module
    return None


#: Node id prefixes of the longest tests of their own, collected first. pytest-xdist's
#: ``loadgroup`` hands out the groups (the largest first), then the tests of no group in
#: collection order; the CI soak (160-260 s), collected last, ran alone on one worker for the
#: suite's last minutes while the other had finished (a timing run's per-worker log).
RUN_FIRST = ("tests/soak/test_soak.py::test_short_soak",)


def run_first_rank(item: pytest.Item) -> int:
    """``item``'s place in :data:`RUN_FIRST` (its length if not there)."""
    for rank, prefix in enumerate(RUN_FIRST):
        if item.nodeid.startswith(prefix):
            return rank
    return len(RUN_FIRST)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups (--dist loadgroup)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = xdist_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=run_first_rank)  # stable: each module's tests stay together, in order


def pytest_configure(config: pytest.Config) -> None:
    """Refuse the pytest whose node ids pytest-xdist 3.8 cannot tag for ``--dist loadgroup``:
    it silently stops grouping, so each worker would start a cluster and build module
    fixtures twice, slowly but green (pytest-dev/pytest-xdist#1386)."""
    if config.getoption("dist", "no") == "loadgroup" and pytest.version_tuple[:2] >= (9, 2):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} breaks pytest-xdist's --dist loadgroup "
            "(pytest-dev/pytest-xdist#1386): install the test extra again (pytest<9.2)"
        )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """py4j's connections log "Closing down clientserver connection" (INFO) from ``__del__``
    as the interpreter exits, into a handler whose stream is closed by then: each such line
    printed a "--- Logging error ---" traceback at the end of every run. Nothing of py4j's
    below a warning is wanted that late."""
    logging.getLogger("py4j").setLevel(logging.WARNING)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked ``kafka_versions(...)`` run once per version (a broker each)."""
    marker = metafunc.definition.get_closest_marker("kafka_versions")
    if marker and "kafka_version" in metafunc.fixturenames:
        versions = list(marker.args) or list(BOTH_VERSIONS)
        metafunc.parametrize(
            "kafka_version",
            versions,
            indirect=True,
            scope="session",
            ids=[f"kafka-{v}" for v in versions],
        )


class BrokerPool:
    """Starts each version's broker on first use and stops them all at the end."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._brokers: dict[str, KafkaBroker] = {}

    def get(self, version: str) -> KafkaBroker:
        if version not in self._brokers:
            broker = KafkaBroker(
                version, data_dir=self._root / f"kafka-{version}", config=TEST_BROKER_CONFIG
            )
            self._brokers[version] = broker.start()
        return self._brokers[version]

    def stop(self) -> None:
        for broker in self._brokers.values():
            broker.stop()


@pytest.fixture(scope="session")
def broker_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerPool]:
    pool = BrokerPool(tmp_path_factory.mktemp("brokers"))
    try:
        yield pool
    finally:
        pool.stop()


@pytest.fixture(scope="session")
def kafka_version(request: pytest.FixtureRequest) -> str:
    return getattr(request, "param", DEFAULT_KAFKA_VERSION)


def needs_local_broker() -> None:
    """Skips a test that starts, stops or secures a broker of its own when the suite runs
    against an external cluster (``KAFKA2PC_TEST_BOOTSTRAP``)."""
    if os.environ.get(REAL_KAFKA_ENV):
        pytest.skip(f"needs the local broker; {REAL_KAFKA_ENV} is set")


@pytest.fixture
def kafka_broker(broker_pool: BrokerPool, kafka_version: str) -> KafkaBroker:
    """The shared broker of this test's version; never kill it (see ``own_broker``)."""
    needs_local_broker()
    return broker_pool.get(kafka_version)


@pytest.fixture
def bootstrap(broker_pool: BrokerPool, kafka_version: str) -> str:
    external = os.environ.get(REAL_KAFKA_ENV)
    if external:
        if kafka_version != DEFAULT_KAFKA_VERSION:
            pytest.skip(f"{REAL_KAFKA_ENV} names one cluster")
        return external
    return broker_pool.get(kafka_version).bootstrap_servers


@pytest.fixture
def own_broker(
    tmp_path: Path, kafka_version: str, request: pytest.FixtureRequest
) -> Iterator[KafkaBroker]:
    """A broker of this test's own, for tests that crash or restart it, or that need
    settings of their own (``@pytest.mark.broker_config({...})``, over the tests' own)."""
    needs_local_broker()
    marker = request.node.get_closest_marker("broker_config")
    config = {**TEST_BROKER_CONFIG, **(marker.args[0] if marker else {})}
    broker = KafkaBroker(kafka_version, data_dir=tmp_path / "kafka", config=config)
    try:
        yield broker.start()
    finally:
        broker.stop()


@pytest.fixture
def settings(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap}


@pytest.fixture
def protocol(settings: dict[str, Any]) -> Iterator[KafkaProtocol]:
    with KafkaProtocol(settings, timeout_ms=10_000) as proto:
        yield proto


@pytest.fixture
def make_topic(protocol: KafkaProtocol):
    """Create a fresh topic (unique name) with the given number of partitions."""

    def create(partitions: int = 3) -> str:
        name = f"t-{uuid.uuid4().hex[:12]}"
        protocol.create_topic(name, partitions)
        return name

    return create


@pytest.fixture
def topic(make_topic) -> str:
    return make_topic(3)


def unique_id(prefix: str = "tx") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def assert_ended(protocol: KafkaProtocol, transactional_id: str) -> None:
    """The coordinator holds nothing open for ``transactional_id`` (asked at once: a writer
    that reports a failed write has ended its transaction before it raises)."""
    described = protocol.describe_transaction(transactional_id)
    assert described is None or not described.state.open, described.to_dict()


def audit(protocol: KafkaProtocol, topic: str, *committables: Committable) -> AuditReport:
    return audit_topic(protocol, topic, committables, duplicates=True)


def assert_exactly_once(
    protocol: KafkaProtocol,
    bootstrap: str | Mapping[str, Any],
    topic: str,
    *committables: Committable,
    committed: int,
    aborted: int | None = None,
    open_: int = 0,
    keys_unique: bool = True,
    start_offsets: Mapping[int, int] | None = None,
) -> tuple[AuditReport, Visible]:
    """Two independent witnesses agree: the markers (our audit) and the broker itself
    (a read_committed consumer). Committed records counted once, no duplicate key,
    aborted records invisible, nothing open (unless ``open_`` says so).

    ``bootstrap`` is the broker's address, or the consumer's whole settings (a secured
    listener: both witnesses then go through it, as ``protocol`` does). ``start_offsets``:
    where each partition's log now starts (after DeleteRecords); the consumer reads from
    the log start either way. The one helper for this check: every tier calls it."""
    report = audit_topic(
        protocol, topic, committables, start_offsets=start_offsets, duplicates=True
    )
    totals = report.totals
    assert totals["committed"] == committed, report.to_dict()
    assert totals["open"] == open_, report.to_dict()
    if aborted is not None:
        assert totals["aborted"] == aborted, report.to_dict()
    if keys_unique:
        assert report.duplicates["extra_copies"] == 0, report.duplicates
    consumer = {"bootstrap.servers": bootstrap} if isinstance(bootstrap, str) else bootstrap
    seen = read_committed(consumer, topic, timeout_s=3 if open_ else 15)
    if not open_:
        assert not seen.stalled, seen.to_dict()
        # Everything committed is visible and nothing else: aborted records are not.
        assert seen.total == committed, (seen.to_dict(), totals)
    else:
        assert seen.total <= committed, (seen.to_dict(), totals)
    if keys_unique:
        assert seen.duplicate_keys == 0, seen.to_dict()
    return report, seen


def cli(*args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``kafka2pc`` in a separate process, as an operator would."""
    return subprocess.run(
        [sys.executable, "-m", "airflow_provider_kafka2pc.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cli_prepare(bootstrap: str, topic: str, tid: str, source: Path) -> subprocess.CompletedProcess:
    """`kafka2pc prepare` keyed by the rows' ``id`` field, in its own process."""
    return cli(
        "prepare",
        "-b",
        bootstrap,
        "-t",
        topic,
        "--transactional-id",
        tid,
        "--input",
        str(source),
        "--key-field",
        "id",
    )


def write_jsonl(path: Path, count: int, start: int = 0) -> Path:
    path.write_text(
        "".join(f'{{"id": {i}, "payload": "row-{i}"}}\n' for i in range(start, start + count))
    )
    return path


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real schema registry (tests/support/registry.py), started once per worker and
    shared by its tests: each names subjects of its own (its topics', or a record name no
    other test registers with another schema). Yields its Confluent-compatible URL."""
    from tests.support.registry import running_registry

    with running_registry(tmp_path_factory.mktemp("registry")) as url:
        yield url


@pytest.fixture(scope="session")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One broker with TLS (mutual), SASL/SCRAM and ACLs enforced (tests/support/secure.py),
    shared by the TLS, ACL and TLS-export tests."""
    needs_local_broker()
    from tests.support.secure import start_secure_broker

    secured = start_secure_broker(tmp_path_factory.mktemp("secure"), TEST_BROKER_CONFIG)
    try:
        yield secured
    finally:
        secured.broker.stop()
