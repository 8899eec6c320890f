"""An Airflow export by source splits (no shuffle), its lost participants repaired for real.

``dag.test()`` runs the export group with ``partitioning="source-splits"`` over a directory
of JSON files: the prepare's spark-submit writes one transaction per file split and the
ledger records the split settings and the input's fingerprint. The commit task's first try
commits participant 0 and dies; by its retry the broker has aborted the other two (their
timeout passed after the COMMIT verdict), so it re-prepares them through the prepare
operator, which hands the ledger's record to the application; every row ends committed
exactly once (audit + read_committed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from airflow_provider_kafka2pc.errors import ConfigurationError
from airflow_provider_kafka2pc.ledger import BatchState, ParticipantState
from airflow_provider_kafka2pc.operators.prepare import SparkKafkaPrepareOperator
from airflow_provider_kafka2pc.spark.source_splits import SourceSplits
from airflow_provider_kafka2pc.transaction.manifest import SOURCE
from tests.airflow.test_loss_repair import (
    EXPORT_TIMEOUT_MS,
    CommitRetriedAfterTheTimeout,
    write_orders,
)
from tests.conftest import assert_exactly_once

FILES = 3
ROWS_PER_FILE = 100


class CommitRetriedAfterTheSplitsTimedOut(CommitRetriedAfterTheTimeout):
    seen: ClassVar[dict[str, Any]] = {}


def write_source(directory: Path) -> Path:
    directory.mkdir()
    for f in range(FILES):
        first = f * ROWS_PER_FILE
        write_orders(directory / f"part-{f}.json", range(first, first + ROWS_PER_FILE))
    return directory


def test_an_export_by_source_splits_repairs_its_lost_participants_exactly_once(
    export_dag, run_export, make_topic, protocol, bootstrap, ledger, tmp_path
):
    topic = make_topic(3)
    rows = FILES * ROWS_PER_FILE
    dag = export_dag(
        topic=topic,
        num_partitions=3,
        retries=1,
        source={"path": str(write_source(tmp_path / "orders")), "format": "json"},
        partitioning=SOURCE,
        transaction_timeout_ms=EXPORT_TIMEOUT_MS,
        commit_margin_s=1.0,
        operator_classes={"commit": CommitRetriedAfterTheSplitsTimedOut},
    )
    result = run_export(dag, day=11)

    assert result.state == "success", result
    assert result.tries["commit"] == 2, result
    seen = CommitRetriedAfterTheSplitsTimedOut.seen
    decided, prepared = seen["batch"], seen["prepared"]
    assert decided.partitioning == SOURCE
    splits = SourceSplits.from_dict(decided.source_splits)
    assert (splits.splits, splits.partitions) == (FILES, 3), splits
    assert [c.record_count for c in prepared] == [ROWS_PER_FILE] * FILES  # a file each
    committed = result.xcom("commit")
    assert [r["partition"] for r in committed["repaired"]] == [1, 2], committed
    assert committed["records"] == rows and committed["state"] == "COMMITTED"
    with ledger.open() as store:
        batch = store.get(decided.export_id, decided.run_key)
        parts = store.participants(decided.export_id, decided.run_key)
    assert batch.state is BatchState.COMMITTED and batch.source_splits == decided.source_splits
    assert [p.state for p in parts] == [ParticipantState.COMMITTED] * 3
    assert parts[0].committable == prepared[0]
    for i in (1, 2):
        assert parts[i].committable.record_count == prepared[i].record_count
        assert parts[i].committable.producer_epoch != prepared[i].producer_epoch
    assert_exactly_once(
        protocol,
        bootstrap,
        topic,
        *prepared,
        *[p.committable for p in parts[1:]],
        committed=rows,
        aborted=2 * ROWS_PER_FILE,
    )


def test_an_unknown_partitioning_is_refused_when_the_dag_is_defined(export_dag, make_topic):
    with pytest.raises(ConfigurationError, match="partitioning must be one of"):
        export_dag(topic=make_topic(1), partitioning="random")

    def spec(**kwargs):
        return SparkKafkaPrepareOperator(
            task_id="prepare",
            export_id="e",
            run_key="k",
            source={"path": "/data"},
            topic="t",
            num_partitions=2,
            id_prefix="p",
            **kwargs,
        ).export_spec()

    # The spec carries each request as asked; the default (auto) leaves the choice to the job.
    for asked in (SOURCE, "kafka-aligned", "hash", "auto"):
        assert spec(partitioning=asked).partitioning == asked
    assert spec().writer == "auto"
