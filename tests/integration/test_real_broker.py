"""What only Apache Kafka's own broker can show, on 4.x and 3.9.

- The coordinator aborts a transaction that outlives its timeout; our commit is LOST.
- A broker killed (SIGKILL) between prepare and commit keeps the prepared transaction
  through its restart; a commit from another process then succeeds exactly once.
- An open transaction holds back read_committed consumers at its first offset (the last
  stable offset) until it ends: dangling transactions are an outage for consumers.
- An id the coordinator does not know fails a whole DescribeTransactions; recovery's
  discovery then asks id by id and still finds the open transactions among them.
- A connection the broker closed while it idled (``connections.max.idle.ms``) is replaced
  on the next request, not reported lost.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from confluent_kafka import Producer

from airflow_provider_kafka2pc.coordination.recovery.discovery import _describe
from airflow_provider_kafka2pc.errors import ProtocolError
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.protocol.described import CoordinatorTxnState, DescribedTransaction
from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from devtools.broker import DEFAULT_KAFKA_VERSION
from devtools.visible import read_committed
from tests.conftest import assert_exactly_once, audit, cli, cli_prepare, unique_id, write_jsonl

pytestmark = pytest.mark.kafka_versions()

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], timeout_s: float, what: str) -> T:
    """Poll ``probe`` until it returns something, or fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not seen within {timeout_s} s")
        time.sleep(0.2)


def describe(protocol: KafkaProtocol, tid: str) -> DescribedTransaction:
    [state] = protocol.describe_transactions([tid])
    return state


# -- a real transaction timeout ----------------------------------------------------------

#: Short enough for a test, long enough that the write itself finishes well inside it.
TIMEOUT_MS = 2_500


def test_coordinator_aborts_a_timed_out_transaction_and_our_commit_is_lost(
    settings, bootstrap, protocol, topic
):
    tid = unique_id("timeout")
    writer = TransactionalWriter(settings, tid, transaction_timeout_ms=TIMEOUT_MS)
    committable = writer.write(topic, ((b"k%d" % i, b"v") for i in range(300)))

    ongoing = describe(protocol, tid)
    assert ongoing.state == "Ongoing", ongoing
    # The committable names exactly the coordinator's producer id and epoch.
    assert (ongoing.producer_id, ongoing.producer_epoch) == (
        committable.producer_id,
        committable.producer_epoch,
    )
    assert ongoing.transaction_timeout_ms == TIMEOUT_MS

    def aborted_by_coordinator() -> DescribedTransaction | None:
        state = describe(protocol, tid)
        return state if state.state == "CompleteAbort" else None

    ended = wait_for(aborted_by_coordinator, 30, "the coordinator's timeout abort")
    waited_ms = time.time() * 1000 - committable.start_time_ms
    assert waited_ms >= TIMEOUT_MS, (waited_ms, ended)
    # The abort bumped the epoch: nobody can commit the old one any more.
    assert ended.producer_epoch > committable.producer_epoch, ended

    result = TransactionController(protocol).commit(committable)
    assert result.outcome is Outcome.LOST, result
    report, _ = assert_exactly_once(
        protocol, bootstrap, topic, committable, committed=0, aborted=300
    )
    assert report.committables[0]["state"] == "ABORTED"
    assert report.totals["non_transactional"] == 0


# -- broker crash between prepare and commit -----------------------------------------------


def test_broker_killed_between_prepare_and_commit_then_commit_from_another_process(
    own_broker, tmp_path: Path
):
    bootstrap = own_broker.bootstrap_servers
    settings = {"bootstrap.servers": bootstrap}
    topic = unique_id("crash")
    with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
        protocol.create_topic(topic, 3)
    tid = unique_id()
    prepared = cli_prepare(bootstrap, topic, tid, write_jsonl(tmp_path / "rows.jsonl", 400))
    assert prepared.returncode == 0, prepared.stderr
    committable = Committable.from_json(prepared.stdout)  # the preparing process has exited

    crashed = own_broker.pid
    own_broker.kill()  # SIGKILL: no clean shutdown, no flush of its own
    with pytest.raises(ProcessLookupError):
        os.kill(crashed, 0)
    own_broker.restart()
    assert own_broker.bootstrap_servers == bootstrap and own_broker.pid != crashed

    with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
        # The coordinator reloaded the prepared transaction from its log.
        reloaded = wait_for(
            lambda: _described_if_loaded(protocol, tid), 60, "the reloaded transaction state"
        )
        assert (reloaded.state, reloaded.producer_id, reloaded.producer_epoch) == (
            "Ongoing",
            committable.producer_id,
            committable.producer_epoch,
        ), reloaded
        assert audit(protocol, topic, committable).totals["open"] == 400

    done = cli("commit", "-b", bootstrap, "-", stdin=committable.to_json())
    assert (json.loads(done.stdout)["outcome"], done.returncode) == ("COMMITTED", 0), done

    with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
        report, seen = assert_exactly_once(
            protocol, bootstrap, topic, committable, committed=400, aborted=0
        )
    assert report.committables[0]["state"] == "COMMITTED"
    assert len(seen.keys) == 400


def _described_if_loaded(protocol: KafkaProtocol, tid: str) -> DescribedTransaction | None:
    """DescribeTransactions once the coordinator has loaded its state (None while loading)."""
    try:
        state = describe(protocol, tid)
    except Exception:  # COORDINATOR_LOAD_IN_PROGRESS and kin, right after the restart
        return None
    return state if state.state is not CoordinatorTxnState.UNKNOWN else None


# -- an open transaction holds back read_committed consumers ----------------------------


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_open_transaction_holds_back_read_committed_until_it_ends(
    settings, bootstrap, protocol, make_topic, end
):
    topic = make_topic(1)
    controller = TransactionController(protocol)

    def write(prefix: bytes, count: int) -> Committable:
        records = ((prefix + b"-%d" % i, b"v") for i in range(count))
        return TransactionalWriter(settings, unique_id()).write(topic, records)

    before = write(b"before", 100)
    assert controller.commit(before).outcome is Outcome.COMMITTED
    held = write(b"held", 50)  # left open
    after = write(b"after", 30)  # another transaction, committed after the open one began
    assert controller.commit(after).outcome is Outcome.COMMITTED
    plain = Producer(settings)
    for i in range(20):
        plain.produce(topic, b"v", b"plain-%d" % i)
    assert plain.flush(30) == 0

    report = audit(protocol, topic, before, held, after)
    assert report.totals == {"committed": 150, "aborted": 0, "open": 50, "non_transactional": 20}
    end_of_log = report.partitions[0].end_offset
    first_open = held.partitions[0].first_offset
    assert before.partitions[0].last_offset < first_open < after.partitions[0].first_offset

    stalled = read_committed(settings, topic, timeout_s=3)
    # Only what precedes the open transaction is visible; committed records after it
    # (the other transaction's, the plain producer's) are held back with it.
    assert stalled.counts == {0: 100}, stalled.to_dict()
    assert stalled.stalled == {0: {"position": first_open, "high_watermark": end_of_log}}

    outcome = controller.commit(held) if end == "commit" else controller.abort(held)
    assert outcome.outcome is (Outcome.COMMITTED if end == "commit" else Outcome.ABORTED)
    visible_held = 50 if end == "commit" else 0
    assert_exactly_once(
        protocol,
        bootstrap,
        topic,
        before,
        held,
        after,
        committed=150 + visible_held,
        aborted=50 - visible_held,
    )


# -- an id the coordinator does not know ---------------------------------------------------


def test_an_unknown_id_fails_describe_and_discovery_asks_id_by_id(
    settings, bootstrap, protocol, make_topic
):
    unknown = unique_id("never-written")
    with pytest.raises(ProtocolError) as raised:
        protocol.describe_transactions([unknown])
    assert raised.value.error_name == "TRANSACTIONAL_ID_NOT_FOUND"
    assert "TRANSACTIONAL_ID_NOT_FOUND" in str(raised.value)  # what `kafka2pc txn describe` says
    assert protocol.describe_transaction(unknown) is None

    topic = make_topic(1)
    tid = unique_id("open")
    held = TransactionalWriter(settings, tid).write(topic, ((b"k%d" % i, b"v") for i in range(20)))
    found = _describe(protocol, [unknown, tid])
    assert list(found) == [tid]
    assert found[tid].identity == (held.producer_id, held.producer_epoch)
    assert TransactionController(protocol).commit(held).outcome is Outcome.COMMITTED
    assert_exactly_once(protocol, bootstrap, topic, held, committed=20, aborted=0)


# -- a connection closed while idle ---------------------------------------------------------


@pytest.mark.kafka_versions(DEFAULT_KAFKA_VERSION)
@pytest.mark.broker_config({"connections.max.idle.ms": "1500"})
def test_a_connection_the_broker_closed_while_idle_is_replaced_on_the_next_request(own_broker):
    """The broker closes a connection idle for ``connections.max.idle.ms`` (10 minutes by
    default; kafka-python closes its own after 9). A protocol that idled that long, on a
    one-node cluster, failed its next request: ``no Kafka node answered (tried 1)``. A
    benchmark's harness met it after a 14-minute check and stopped its broker."""
    settings = {"bootstrap.servers": own_broker.bootstrap_servers}
    with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
        protocol.create_topic("idle", 2)
        assert sorted(protocol.partition_leaders("idle", wait_s=3)) == [0, 1]
        time.sleep(4)  # the broker closes both connections meanwhile
        assert sorted(protocol.partition_leaders("idle")) == [0, 1]
        tid = unique_id("after-idle")
        held = TransactionalWriter(settings, tid).write("idle", [(b"k", b"v")])
        time.sleep(4)
        assert TransactionController(protocol).commit(held).outcome is Outcome.COMMITTED
        assert_exactly_once(protocol, settings["bootstrap.servers"], "idle", held, committed=1)
