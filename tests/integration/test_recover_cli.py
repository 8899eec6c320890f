"""``kafka2pc recover`` on the real broker: open transactions found under the export's
prefix and resolved by the ledger's verdicts, live runs and other prefixes left alone.

The dangling transactions are made the way crashes leave them: real transactions written
by the writer under leased ids and never finished, a COMMIT whose commit crashed after
EndTxn (a zombie then re-opened the id), ids under the prefix no batch holds.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from airflow_provider_kafka2pc.coordination.recovery import recover
from airflow_provider_kafka2pc.errors import UnsupportedError
from airflow_provider_kafka2pc.ledger import BatchState, Ledger, Verdict
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.transaction.controller import RetryPolicy, TransactionController
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from devtools.visible import read_committed
from tests.conftest import assert_exactly_once, cli

ROWS = 6  # per transaction
#: Long enough that a batch recorded just before the command runs is still live then.
GRACE_S = 10.0
#: The transactions outlive every test here; only recovery ends them.
TIMEOUT_MS = 120_000


def open_transaction(settings, tid, topic, tag):
    """A transaction written and left open, as a crashed writer leaves it."""
    records = [(f"{tag}-{n}".encode(), b"{}") for n in range(ROWS)]
    return TransactionalWriter(settings, tid, transaction_timeout_ms=TIMEOUT_MS).write(
        topic, records
    )


def prepared_batch(store, settings, export_id, prefix, run_key, topic, verdict=None):
    """Leased, written, recorded (and decided): a run that crashed before finishing."""
    batch = store.begin(export_id, run_key, topic=topic, id_prefix=prefix, num_partitions=2)
    committables = [
        open_transaction(settings, tid, topic, f"{run_key}-{i}")
        for i, tid in enumerate(batch.transactional_ids)
    ]
    store.record_prepared(export_id, run_key, committables, source_rows=2 * ROWS)
    if verdict is not None:
        store.decide(export_id, run_key, verdict, "decided by the crashed run")
    return batch, committables


def recover_cli(bootstrap, ledger_url, export_id, prefix, *extra):
    done = cli(
        "recover",
        "-b",
        bootstrap,
        "--export-id",
        export_id,
        "--id-prefix",
        prefix,
        "--ledger-url",
        ledger_url,
        *extra,
    )
    report = json.loads(done.stdout.splitlines()[-1]) if done.stdout else None
    return done, report


def state(protocol, tid):
    described = protocol.describe_transaction(tid)
    return None if described is None else described.state


@pytest.fixture
def names():
    """An export of its own: id prefix, export id (the ledger is per test)."""
    prefix = f"rc{uuid.uuid4().hex[:8]}"
    return prefix, f"recover.{prefix}"


@pytest.fixture
def store(tmp_path: Path):
    with Ledger(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        yield ledger


@pytest.mark.kafka_versions()
def test_recover_resolves_by_verdict_leaves_live_runs_and_other_prefixes(
    kafka_version, store, tmp_path, names, make_topic, protocol, bootstrap, settings
):
    prefix, export_id = names
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    topic = make_topic(2)
    # COMMIT verdict, its commit task crashed after committing participant 0 without
    # recording it; then a zombie re-opened that id (another epoch): not ours to commit.
    commit, (c0, c1) = prepared_batch(
        store, settings, export_id, prefix, "crashed-commit", topic, Verdict.COMMIT
    )
    controller = TransactionController(protocol, RetryPolicy(deadline_s=30))
    assert controller.commit(c0).outcome.value == "COMMITTED"
    zombie = open_transaction(settings, c0.transactional_id, topic, "zombie")
    assert zombie.producer_epoch != c0.producer_epoch
    abort, _ = prepared_batch(
        store, settings, export_id, prefix, "crashed-abort", topic, Verdict.ABORT
    )
    unknown = f"{prefix}-9"  # under the prefix, never leased: no ledger record at all
    open_transaction(settings, unknown, topic, "unknown")
    others = [f"{prefix}x-0", f"{prefix}-eu-0"]  # another export's prefixes
    for tid in others:
        open_transaction(settings, tid, topic, tid)
    time.sleep(GRACE_S)
    grace = ("--grace-period-s", str(GRACE_S))

    started = time.monotonic()
    dry, planned = recover_cli(bootstrap, ledger_url, export_id, prefix, *grace, "--dry-run")
    # The live run begins just before the real round: it must stay within the grace period
    # however slowly the commands start on a loaded machine.
    live, _ = prepared_batch(store, settings, export_id, prefix, "live-run", topic)
    first, report = recover_cli(bootstrap, ledger_url, export_id, prefix, *grace)
    first_s = time.monotonic() - started

    assert dry.returncode == 1, dry.stderr
    assert planned["dry_run"] and not (planned["committed"] or planned["fenced"])
    assert set(planned["planned"]) >= {f"{export_id}/crashed-commit", unknown}
    assert first.returncode == 1, first.stderr  # the live run is left
    found = {t["transactional_id"]: t for t in report["found"]}
    assert set(found) == {
        *commit.transactional_ids,
        *abort.transactional_ids,
        unknown,
        *live.transactional_ids,
    }
    assert not set(found) & set(others)
    assert found[c0.transactional_id]["action"] == "fence"
    assert "not ours to commit" in found[c0.transactional_id]["why"]
    assert found[c1.transactional_id]["action"] == "commit"
    assert set(report["committed"]) == set(commit.transactional_ids)
    assert report["committed"][c0.transactional_id].startswith("ALREADY_COMMITTED")
    assert report["committed"][c1.transactional_id].startswith("COMMITTED")
    assert set(report["aborted"]) == set(abort.transactional_ids)
    # abort + fence; the zombie and the unknown id fenced
    assert set(report["fenced"]) == {*abort.transactional_ids, c0.transactional_id, unknown}
    assert set(report["left"]) == {f"{export_id}/live-run", *live.transactional_ids}
    assert sorted(report["live"]) == sorted(report["left"])
    assert report["failed"] == {}
    assert store.get(export_id, "crashed-commit").state is BatchState.COMMITTED
    assert store.get(export_id, "crashed-abort").state is BatchState.ABORTED
    assert store.get(export_id, "live-run").state is BatchState.PREPARED
    for tid in [*live.transactional_ids, *others]:
        assert state(protocol, tid) == "Ongoing", tid
    method = report["discovery"][prefix]
    assert ("on the broker" if kafka_version.startswith("4.") else "filtered here") in method

    time.sleep(GRACE_S)  # the live run has now been silent for the grace period
    second, again = recover_cli(bootstrap, ledger_url, export_id, prefix, *grace)

    assert second.returncode == 0, (second.stderr, again)
    assert again["left"] == {} and again["done"] is True
    assert set(again["aborted"]) == set(live.transactional_ids)
    live_batch = store.get(export_id, "live-run")
    assert live_batch.state is BatchState.ABORTED and "recovery" in live_batch.verdict_reason
    for tid in others:  # still untouched; now cleaned up by hand
        assert state(protocol, tid) == "Ongoing", tid
        controller.fence(tid)
    # Aborted: crashed-abort 2, live-run 2, the zombie, the unknown id, the 2 others.
    assert_exactly_once(protocol, bootstrap, topic, committed=2 * ROWS, aborted=8 * ROWS)
    print(f"kafka {kafka_version}: dry run + first recover {first_s:.1f} s")


def test_read_committed_consumer_moves_on_after_recovery(
    store, tmp_path, names, make_topic, protocol, bootstrap, settings
):
    prefix, export_id = names
    topic = make_topic(1)
    before = TransactionalWriter(settings, f"{prefix}-writer").write(
        topic, [(f"before-{n}".encode(), b"{}") for n in range(ROWS)]
    )
    TransactionController(protocol).commit(before)
    # The decision said COMMIT; the commit task died: the partition is stuck behind it.
    prepared_batch(store, settings, export_id, prefix, "stuck", topic, Verdict.COMMIT)
    stalled = read_committed(settings, topic, timeout_s=3)
    assert stalled.stalled and stalled.total == ROWS, stalled.to_dict()

    done, report = recover_cli(
        bootstrap, f"sqlite:///{tmp_path / 'ledger.db'}", export_id, prefix, "--grace-period-s", "0"
    )

    assert done.returncode == 0, (done.stderr, report)
    assert report["batches"] == {f"{export_id}/stuck": f"COMMITTED ({2 * ROWS} records)"}
    _, seen = assert_exactly_once(protocol, bootstrap, topic, committed=3 * ROWS, aborted=0)
    assert not seen.stalled and seen.total == 3 * ROWS


def test_a_lost_participant_of_a_commit_verdict_fails_loudly(
    store, tmp_path, names, make_topic, protocol, bootstrap, settings
):
    """COMMIT verdict, but a zombie re-initialised participant 0's id before the commit:
    that aborted the prepared transaction. The zombie's is fenced, participant 1 committed,
    and the loss is reported for a person (or loss repair), not retried forever."""
    prefix, export_id = names
    topic = make_topic(2)
    _, (c0, c1) = prepared_batch(store, settings, export_id, prefix, "lost", topic, Verdict.COMMIT)
    open_transaction(settings, c0.transactional_id, topic, "zombie")

    done, report = recover_cli(
        bootstrap,
        f"sqlite:///{tmp_path / 'ledger.db'}",
        export_id,
        prefix,
        "--grace-period-s",
        "0",
        # The loud failure: without the copy from the log (which repairs it: tested in
        # tests/integration/test_log_copy_repair.py), nothing here can re-write partition 0.
        "--no-repair-from-log",
    )

    assert done.returncode == 1
    assert "needs a person" in done.stderr
    assert set(report["fenced"]) == {c0.transactional_id}
    assert set(report["committed"]) == {c1.transactional_id}
    assert "partition 0" in report["failed"][f"{export_id}/lost"]
    assert store.get(export_id, "lost").state is BatchState.COMMIT_DECIDED
    assert_exactly_once(protocol, bootstrap, topic, committed=ROWS, aborted=2 * ROWS)


class NoListing(KafkaProtocol):
    """A broker without ListTransactions (Kafka < 3.0), as far as recovery can tell."""

    def list_transactions(self, prefix=None, states=None):
        raise UnsupportedError("the broker does not offer LIST_TRANSACTIONS (v0+)")


def test_without_list_transactions_the_leases_are_the_candidates(
    store, names, make_topic, protocol, bootstrap, settings
):
    prefix, export_id = names
    topic = make_topic(2)
    batch, _ = prepared_batch(store, settings, export_id, prefix, "crashed", topic, Verdict.ABORT)
    # A finished batch gave its ids back; a zombie then wrote under one of them.
    done_batch = store.begin(export_id, "done", topic=topic, id_prefix=prefix, num_partitions=1)
    store.decide(export_id, "done", Verdict.ABORT, "never prepared")
    store.finish(export_id, "done")
    free = done_batch.transactional_ids[0]
    open_transaction(settings, free, topic, "zombie")
    unleased = f"{prefix}-9"  # no lease: invisible without a listing (and left open here)
    open_transaction(settings, unleased, topic, "unleased")

    with NoListing(settings, timeout_ms=10_000) as blind:
        report = recover(
            store,
            blind,
            TransactionController(blind),
            export_id,
            [prefix],
            grace_period=timedelta(0),
        )

    assert "ledger leases" in report.discovery[prefix]
    assert {t["transactional_id"] for t in report.found} == {*batch.transactional_ids, free}
    assert set(report.aborted) == set(batch.transactional_ids)
    assert set(report.fenced) == {*batch.transactional_ids, free}
    assert report.done, report.to_dict()
    assert state(protocol, unleased) == "Ongoing"
    TransactionController(protocol).fence(unleased)
    assert_exactly_once(protocol, bootstrap, topic, committed=0, aborted=4 * ROWS)


def test_a_prefix_another_export_uses_is_refused_and_nothing_touched(
    store, tmp_path, names, make_topic, protocol, bootstrap, settings
):
    prefix, export_id = names
    topic = make_topic(1)
    batch, _ = prepared_batch(store, settings, "someone.else", prefix, "running", topic)

    done, report = recover_cli(
        bootstrap,
        f"sqlite:///{tmp_path / 'ledger.db'}",
        export_id,
        prefix,
        "--grace-period-s",
        "0",
    )

    assert done.returncode == 2, done.stderr
    assert report["error"] == "PrefixOwnedError" and "someone.else" in report["message"]
    for tid in batch.transactional_ids:
        assert state(protocol, tid) == "Ongoing"
        TransactionController(protocol).fence(tid)
    assert_exactly_once(protocol, bootstrap, topic, committed=0, aborted=2 * ROWS)


def test_help_names_every_option():
    done = cli("recover", "--help")
    assert done.returncode == 0
    for option in ("--export-id", "--id-prefix", "--ledger-url", "--grace-period-s", "--dry-run"):
        assert option in done.stdout


def test_a_ledger_that_does_not_exist_is_refused(tmp_path, bootstrap):
    missing = f"sqlite:///{tmp_path / 'nope' / 'ledger.db'}"
    done, report = recover_cli(bootstrap, missing, "e", "p")

    assert done.returncode == 2
    assert "does not exist" in report["message"]
    assert not (tmp_path / "nope").exists()


class NoStartTime(KafkaProtocol):
    """A coordinator that does not report when a transaction began (Apache Kafka always
    does for an Ongoing one; some Kafka-compatible brokers do not): the one answer here
    no real broker of ours gives, so it alone is scripted."""

    def describe_transactions(self, transactional_ids):
        return [
            dataclasses.replace(d, transaction_start_time_ms=-1)
            for d in super().describe_transactions(transactional_ids)
        ]


def test_an_undated_transaction_no_record_holds_is_fenced_a_grace_period_after_first_seen(
    store, names, make_topic, protocol, bootstrap, settings
):
    """Open under the export's prefix, held by no batch, start not reported: left while
    recovery has seen it for less than the grace period (the first sighting kept in the
    ledger across rounds and processes), fenced once it has seen it that long. One on a
    pooled id back in the pool (its batch finished) is a late opener: fenced at once, each
    time one opens there, whatever its sighting."""
    prefix, export_id = names
    topic = make_topic(1)
    done = store.begin(export_id, "done", topic=topic, id_prefix=prefix, num_partitions=1)
    store.decide(export_id, "done", Verdict.ABORT, "never prepared")
    store.finish(export_id, "done")
    free, stranger = done.transactional_ids[0], f"{prefix}-7"
    open_transaction(settings, free, topic, "zombie")
    open_transaction(settings, stranger, topic, "stranger")
    grace = timedelta(minutes=10)
    first = datetime.now(UTC)

    def round_at(now):
        with NoStartTime(settings, timeout_ms=10_000) as undated:
            return recover(
                store,
                undated,
                TransactionController(undated),
                export_id,
                [prefix],
                grace_period=grace,
                now=now,
            )

    seen = round_at(first)
    assert set(seen.live) == {stranger}, seen.to_dict()
    assert set(seen.fenced) == {free} and "a late opener" in seen.fenced[free], seen.to_dict()
    assert set(store.sightings(prefix)) == {free, stranger}
    almost = round_at(first + grace - timedelta(seconds=1))
    assert set(almost.live) == {stranger} and not almost.fenced, almost.to_dict()
    assert "first seen open 9 min 59 s ago" in almost.left[stranger]
    assert set(store.sightings(prefix)) == {stranger}  # the fenced one is forgotten

    # A zombie opens on `free` again: fenced at once again, not first seen and waited for.
    open_transaction(settings, free, topic, "zombie-again")
    settled = round_at(first + grace)
    assert set(settled.fenced) == {stranger, free}, settled.to_dict()
    assert "open since recovery first saw it 10 min 0 s ago" in settled.fenced[stranger]
    assert "a late opener" in settled.fenced[free]
    assert state(protocol, stranger) != "Ongoing"

    later = round_at(first + 2 * grace + timedelta(seconds=1))
    assert not later.found and later.done, later.to_dict()
    assert store.sightings(prefix) == {}
    assert_exactly_once(protocol, bootstrap, topic, committed=0, aborted=3 * ROWS)
