"""What the Kafka exports page reads, on the SQLite ledger and the real broker (no browser:
``test_exports_page.py`` drives the page on PostgreSQL).

Reading is read-only: a missing SQLite ledger is reported, not created; the broker is asked
by a dry recovery round, which leaves every transaction it finds open.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from airflow_provider_kafka2pc.ledger import BatchState, Verdict
from airflow_provider_kafka2pc.plugins.overview import Sources, read_overview
from airflow_provider_kafka2pc.transaction.controller import TransactionController
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from tests.airflow import dagtest
from tests.airflow.test_recovery import describe_state
from tests.conftest import assert_exactly_once

ROWS = 20
GRACE = timedelta(minutes=5)


def read(**kwargs):
    sources = Sources(dagtest.KAFKA_CONN_ID, dagtest.LEDGER_CONN_ID)
    options = {"visible": lambda e: True, "dag_of": lambda e: None, "recent": 10}
    return read_overview(sources, grace_period=GRACE, **{**options, **kwargs})


def test_a_missing_sqlite_ledger_is_reported_not_created(ledger, kafka_connection):
    overview = read()
    assert overview.exports == []
    assert f"no ledger at {ledger.path} yet" in overview.error
    assert not ledger.path.exists()


def write(settings, tid, topic, tag):
    records = [(f"{tag}-{n}".encode(), b"{}") for n in range(ROWS // 2)]
    return TransactionalWriter(settings, tid, transaction_timeout_ms=120_000).write(topic, records)


def test_overview_of_an_export_on_sqlite(
    ledger, kafka_connection, make_topic, protocol, settings, bootstrap
):
    """A committed batch, a live one (prepared a moment ago, its transactions open) and a
    transaction nobody recorded: each shown with what recovery would do, nothing touched."""
    topic = make_topic(2)
    export_id = f"page{uuid.uuid4().hex[:6]}.export"
    prefix = export_id
    with ledger.open() as store:
        for run_key in ("done", "live"):
            batch = store.begin(export_id, run_key, topic=topic, id_prefix=prefix, num_partitions=2)
            committables = [
                write(settings, tid, topic, f"{run_key}{i}")
                for i, tid in enumerate(batch.transactional_ids)
            ]
            store.record_prepared(export_id, run_key, committables, source_rows=ROWS)
            if run_key == "done":
                store.decide(export_id, run_key, Verdict.COMMIT, "ok")
                TransactionController(protocol).commit_all(committables)
                for c in committables:
                    store.record_outcome(export_id, run_key, c.transactional_id, "COMMITTED", "ok")
                store.finish(export_id, run_key)
        live_ids = list(batch.transactional_ids)
    stranger = f"{prefix}-9"  # under the prefix, never leased
    write(settings, stranger, topic, "stranger")

    hidden = read(visible=lambda e: False)
    assert hidden.exports == [] and hidden.error is None

    overview = read(dag_of=lambda e: e.split(".")[0])
    assert overview.error is None, overview.error
    (export,) = overview.exports
    assert export.dag_id == export_id.split(".")[0]
    assert export.in_doubt and export.id_prefix == prefix
    rows = {row.batch.run_key: row for row in export.batches}
    assert [row.batch.run_key for row in export.batches] == ["live", "done"]  # newest first
    assert rows["done"].batch.state is BatchState.COMMITTED and not rows["done"].in_doubt
    assert rows["done"].seconds_left is None and rows["done"].records == ROWS
    live = rows["live"]
    assert live.in_doubt and 60 < live.seconds_left <= 120
    assert live.plan.startswith("left alone: PREPARED") and "within the grace period" in live.plan
    assert sorted(lease.transactional_id for lease in export.leased) == sorted(live_ids)
    found = {t["transactional_id"]: t for t in export.dry_run.found}
    assert set(found) == {*live_ids, stranger}
    assert {found[tid]["holder"] for tid in live_ids} == {f"{export_id}/live"}
    assert found[stranger]["holder"] is None and found[stranger]["action"] == "leave"
    assert not export.dry_run.batches and not export.dry_run.fenced  # a dry run
    for tid in [*live_ids, stranger]:
        assert describe_state(protocol, tid) == "Ongoing"
        TransactionController(protocol).fence(tid)
    # Both witnesses: the committed batch once; the live one and the stranger, fenced, aborted.
    assert_exactly_once(protocol, bootstrap, topic, committed=ROWS, aborted=ROWS + ROWS // 2)
