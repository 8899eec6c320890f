"""Loss repair from the log after a real Spark prepare, with the source deleted first.

Each writer (confluent-kafka in Python workers with zstd, Kafka's Java producer in the
executors with lz4) prepares a parquet source; the verdict is COMMIT; the broker aborts
two participants by their (short) timeout; the parquet files are DELETED; the commit,
given a log copy and a re-prepare that fails the test if called, commits every row exactly
once, and the committed records are those the source gave: each key once, with its value
(the row as JSON, as the prepare encodes it) and its header; and the repaired participants'
records are the lost ones, field by field (partition, order, key, value, headers, CreateTime).
"""

from __future__ import annotations

import json
import shutil
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from airflow_provider_kafka2pc.coordination.finish import Coordinator
from airflow_provider_kafka2pc.ledger import BatchState, Ledger, Verdict
from airflow_provider_kafka2pc.spark import prepare_dataframe
from airflow_provider_kafka2pc.transaction.controller import TransactionController
from airflow_provider_kafka2pc.transaction.log import LogReader
from airflow_provider_kafka2pc.transaction.log_copy import LogCopy
from tests.conftest import assert_exactly_once, unique_id
from tests.support.spark import local_session

from .test_log_copy_repair import never, records_in, wait_aborted_by_broker

ROWS = 4_000
#: Long enough for the prepare of every partition, short enough to wait out.
TIMEOUT_MS = 15_000


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    yield from local_session()


@pytest.mark.parametrize(("writer", "codec"), [("python", "zstd"), ("jvm", "lz4")])
def test_a_lost_participant_is_repaired_from_the_log_with_the_source_deleted(
    spark, settings, bootstrap, protocol, make_topic, tmp_path, writer, codec
):
    topic = make_topic(4)
    source = tmp_path / "orders"
    source.mkdir()
    rows = [
        {"id": f"o-{n:06d}", "amount": n * 1.5, "region": ["eu", "us", "ap"][n % 3]}
        for n in range(ROWS)
    ]
    pq.write_table(pa.Table.from_pylist(rows), source / "part-0.parquet")
    export = unique_id("logcopy-spark")
    with Ledger(f"sqlite:///{tmp_path / 'ledger.db'}") as store:
        batch = store.begin(export, "k", topic=topic, id_prefix=export, num_partitions=4)
        manifest = prepare_dataframe(
            spark.read.parquet(str(source)),
            topic=topic,
            transactional_ids=list(batch.transactional_ids),
            producer_config={**settings, "compression.codec": codec},
            key_column="id",
            header_columns=["region"],
            transaction_timeout_ms=TIMEOUT_MS,
            writer=writer,
            # Four participants from one file: the shuffle (source splits would give one).
            partitioning="kafka-aligned",
        )
        store.record_prepared(export, "k", manifest.committables, source_rows=ROWS)
        store.decide(export, "k", Verdict.COMMIT, "test")
        controller = TransactionController(protocol)
        kept = [manifest.committables[0], manifest.committables[3]]
        assert {r.outcome.value for r in controller.commit_all(kept)} == {"COMMITTED"}
        lost = [manifest.committables[1], manifest.committables[2]]
        wait_aborted_by_broker(protocol, [c.transactional_id for c in lost], 60)
        originals = [records_in(bootstrap, c, "read_uncommitted") for c in lost]
        shutil.rmtree(source)  # the source is gone: only the log can give the rows back

        started = time.monotonic()
        coordinator = Coordinator(store, controller, LogCopy(LogReader(protocol), settings))
        finished = coordinator.commit(export, "k", never)
        seconds = time.monotonic() - started
        assert finished.batch.state is BatchState.COMMITTED
        assert finished.repaired_from == {1: "log", 2: "log"}, finished.notes
        assert seconds < 30, seconds  # no Spark job: the copy and the commit only
        final = [p.committable for p in store.participants(export, "k")]
    lost_rows = sum(c.record_count for c in lost)
    _, seen = assert_exactly_once(
        protocol, bootstrap, topic, *lost, *final, committed=ROWS, aborted=lost_rows
    )
    assert sorted(k.decode() for k in seen.keys) == [r["id"] for r in rows]
    # The copies hold the lost records themselves, in their partitions and order.
    repaired = [c for c in final if c.transactional_id in {x.transactional_id for x in lost}]
    assert [records_in(bootstrap, c, "read_committed") for c in repaired] == originals
    # Every committed record is its source row: key, value (the row as JSON), header.
    committed = sorted(
        (key.decode(), json.loads(value), headers)
        for c in final
        for records in records_in(bootstrap, c, "read_committed").values()
        for key, value, headers, _ in records
    )
    assert committed == [(r["id"], r, [("region", r["region"].encode())]) for r in rows]
