"""Prepare in one process, finish from another, and prove the outcome by two witnesses.

Every final state is checked by the log audit (markers applied by us) and by a
read_committed consumer (the broker's own view); on Apache Kafka 4.x and 3.9.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from tests.conftest import assert_exactly_once, audit, cli, cli_prepare, unique_id, write_jsonl

pytestmark = pytest.mark.kafka_versions()

N = 500


def prepare_in_child(
    bootstrap: str, topic: str, tid: str, tmp_path: Path, n: int = N
) -> Committable:
    """`kafka2pc prepare` in a child process that exits before we go on."""
    source = write_jsonl(tmp_path / f"{tid}.jsonl", n)
    done = cli_prepare(bootstrap, topic, tid, source)
    assert done.returncode == 0, done.stderr
    return Committable.from_json(done.stdout)


def finish_in_child(bootstrap: str, action: str, committable: Committable) -> dict:
    done = cli(action, "-b", bootstrap, "-", stdin=committable.to_json())
    result = json.loads(done.stdout)
    result["returncode"] = done.returncode
    return result


def assert_still_open(report, open_: int) -> None:
    """A state before the end, by the audit alone (a read_committed consumer would stall)."""
    assert report.totals == {
        "committed": 0,
        "aborted": 0,
        "open": open_,
        "non_transactional": 0,
    }, report.to_dict()


def test_prepare_in_exited_child_then_commit_from_another(bootstrap, protocol, topic, tmp_path):
    committable = prepare_in_child(bootstrap, topic, unique_id(), tmp_path)
    assert committable.record_count == N
    assert len(committable.partitions) == 3  # keyed rows spread over every partition

    open_report = audit(protocol, topic, committable)
    assert_still_open(open_report, N)
    assert open_report.committables[0]["state"] == "OPEN"

    result = finish_in_child(bootstrap, "commit", committable)
    assert (result["outcome"], result["returncode"]) == ("COMMITTED", 0)

    report, seen = assert_exactly_once(
        protocol, bootstrap, topic, committable, committed=N, aborted=0
    )
    assert report.committables[0]["state"] == "COMMITTED"
    assert report.duplicates["committed_keys"] == N
    assert len(seen.keys) == N


def test_abort_from_another_process(bootstrap, protocol, topic, tmp_path):
    committable = prepare_in_child(bootstrap, topic, unique_id(), tmp_path)
    result = finish_in_child(bootstrap, "abort", committable)
    assert (result["outcome"], result["returncode"]) == ("ABORTED", 0)
    assert_exactly_once(protocol, bootstrap, topic, committable, committed=0, aborted=N)


def test_repeated_commit_is_already_committed_without_duplicates(
    bootstrap, protocol, topic, tmp_path
):
    committable = prepare_in_child(bootstrap, topic, unique_id(), tmp_path)
    outcomes = [finish_in_child(bootstrap, "commit", committable)["outcome"] for _ in range(3)]
    assert outcomes == ["COMMITTED", "ALREADY_COMMITTED", "ALREADY_COMMITTED"]
    # Abort after commit must not pretend success.
    late_abort = finish_in_child(bootstrap, "abort", committable)
    assert (late_abort["outcome"], late_abort["returncode"]) == ("ALREADY_COMMITTED", 1)
    assert_exactly_once(protocol, bootstrap, topic, committable, committed=N, aborted=0)


def test_fenced_committable_is_lost_and_nothing_commits(bootstrap, protocol, topic, tmp_path):
    tid = unique_id()
    committable = prepare_in_child(bootstrap, topic, tid, tmp_path)
    fenced = cli("fence", "-b", bootstrap, "--transactional-id", tid)
    assert fenced.returncode == 0, fenced.stderr
    assert json.loads(fenced.stdout)["producer_epoch"] > committable.producer_epoch

    result = finish_in_child(bootstrap, "commit", committable)
    assert (result["outcome"], result["returncode"]) == ("LOST", 1)
    report, _ = assert_exactly_once(protocol, bootstrap, topic, committable, committed=0, aborted=N)
    assert report.committables[0]["state"] == "ABORTED"


def test_commit_after_abort_is_lost(bootstrap, protocol, topic, tmp_path):
    committable = prepare_in_child(bootstrap, topic, unique_id(), tmp_path, n=50)
    assert finish_in_child(bootstrap, "abort", committable)["outcome"] == "ABORTED"
    assert finish_in_child(bootstrap, "commit", committable)["outcome"] == "LOST"
    assert_exactly_once(protocol, bootstrap, topic, committable, committed=0, aborted=50)


CHILD = textwrap.dedent("""
    import gc, os, sys
    from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
    bootstrap, topic, tid, mode = sys.argv[1:5]
    writer = TransactionalWriter({"bootstrap.servers": bootstrap}, tid)
    committable = writer.write(topic, ((b"k%d" % i, b"v%d" % i) for i in range(200)))
    del writer
    gc.collect()
    print(committable.to_json(), flush=True)
    if mode == "gc":        # stay alive until the parent has committed
        sys.stdin.readline()
    elif mode == "os_exit":
        os._exit(0)
""")


@pytest.mark.parametrize("mode", ["gc", "exit", "os_exit"])
def test_transaction_survives_writer_lifetime(bootstrap, protocol, topic, mode):
    """Garbage collection of the producer and process exit leave the transaction open."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, bootstrap, topic, unique_id(), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    committable = Committable.from_json(child.stdout.readline())
    if mode != "gc":
        assert child.wait(timeout=60) == 0
    assert_still_open(audit(protocol, topic, committable), 200)

    result = TransactionController(protocol).commit(committable)
    assert result.outcome is Outcome.COMMITTED
    if mode == "gc":
        child.communicate("done\n", timeout=60)
        assert child.returncode == 0
    assert_exactly_once(protocol, bootstrap, topic, committable, committed=200, aborted=0)


def test_interleaved_transactions_are_told_apart(settings, bootstrap, protocol, topic):
    """Two open transactions on the same partitions: one committed, one aborted."""
    first = TransactionalWriter(settings, unique_id()).write(
        topic, ((b"a%d" % i, b"x") for i in range(300))
    )
    second = TransactionalWriter(settings, unique_id()).write(
        topic, ((b"b%d" % i, b"y") for i in range(120))
    )
    controller = TransactionController(protocol)
    assert controller.abort(second).outcome is Outcome.ABORTED
    assert controller.commit(first).outcome is Outcome.COMMITTED

    report, _ = assert_exactly_once(
        protocol, bootstrap, topic, first, second, committed=300, aborted=120
    )
    views = {v["transactional_id"]: v for v in report.committables}
    assert views[first.transactional_id]["committed"] == 300
    assert views[second.transactional_id]["aborted"] == 120


def test_reused_transactional_id_fences_the_previous_writer(settings, bootstrap, protocol, topic):
    """A new writer on the same id aborts what the old one left open (Spark task retry)."""
    tid = unique_id()
    stale = TransactionalWriter(settings, tid).write(
        topic, [(b"%d" % i, b"old") for i in range(40)]
    )
    fresh = TransactionalWriter(settings, tid).write(
        topic, [(b"%d" % i, b"new") for i in range(25)]
    )
    assert fresh.producer_epoch > stale.producer_epoch
    controller = TransactionController(protocol)
    assert controller.commit(stale).outcome is Outcome.LOST
    assert controller.commit(fresh).outcome is Outcome.COMMITTED
    report, _ = assert_exactly_once(
        protocol, bootstrap, topic, stale, fresh, committed=25, aborted=40
    )
    assert [v["state"] for v in report.committables] == ["ABORTED", "COMMITTED"]


def test_empty_input_opens_nothing(settings, bootstrap, protocol, topic):
    committable = TransactionalWriter(settings, unique_id()).write(topic, [])
    assert committable.is_empty and committable.partitions == ()
    assert TransactionController(protocol).commit(committable).outcome is Outcome.COMMITTED
    report, _ = assert_exactly_once(protocol, bootstrap, topic, committed=0, aborted=0)
    assert report.totals["non_transactional"] == 0
    assert {p.end_offset for p in report.partitions.values()} == {0}


def test_backpressure_waits_instead_of_failing(settings, bootstrap, protocol, topic):
    """A tiny local queue forces BufferError on every few records; all still land once."""
    writer = TransactionalWriter({**settings, "queue.buffering.max.messages": 50}, unique_id())
    committable = writer.write(topic, ((b"%d" % i, b"v" * 100) for i in range(5_000)))
    assert committable.record_count == 5_000
    assert TransactionController(protocol).commit(committable).outcome is Outcome.COMMITTED
    assert_exactly_once(protocol, bootstrap, topic, committable, committed=5_000, aborted=0)


def test_commit_all_many_participants_sharing_partitions(settings, bootstrap, protocol, topic):
    committables = [
        TransactionalWriter(settings, unique_id()).write(
            topic, ((b"%d-%d" % (n, i), b"v") for i in range(50))
        )
        for n in range(20)
    ]
    results = TransactionController(protocol).commit_all(committables)
    assert {r.outcome for r in results} == {Outcome.COMMITTED}
    report, _ = assert_exactly_once(
        protocol, bootstrap, topic, *committables, committed=1000, aborted=0
    )
    assert {v["state"] for v in report.committables} == {"COMMITTED"}
