"""A prepare's per-partition progress reaches the task log: the executors' lines, from the
spark-submit output that ``SparkSubmitOperator`` copies into the log (Spark ``local[2]``).

The interval is tiny here so that every Arrow batch (10,000 rows) writes a line; that lines
come at most once per interval is ``tests/unit/spark/test_progress.py``'s. The same run
shows that the operator's default reaches the job aligned with Kafka (``align_with_kafka``):
each of its two transactions writes one Kafka partition of two, so the log holds two commit
markers, not four."""

from __future__ import annotations

import re

from tests.conftest import assert_exactly_once

ROWS = 60_000
LINE = re.compile(
    r"kafka2pc progress (?P<label>\S+): partition (?P<partition>\d+): "
    r"(?P<done>done, )?(?P<rows>[\d,]+) rows written"
)


def test_prepare_logs_rows_written_per_partition_then_done(
    export_dag, run_export, make_topic, protocol, bootstrap, capfd
):
    topic = make_topic(2)
    dag = export_dag(
        topic=topic,
        rows=ROWS,
        prepare_kwargs={"progress_interval_s": 0.001},
        # Progress lines come from the Python writer (the JVM writer has none yet).
        writer="python",
    )

    result = run_export(dag, day=3)

    assert result.state == "success", result
    prepared = result.xcom("prepare")
    out, err = capfd.readouterr()
    seen: dict[int, list[tuple[int, bool]]] = {}
    for match in LINE.finditer(out + err):
        rows = int(match["rows"].replace(",", ""))
        seen.setdefault(int(match["partition"]), []).append((rows, bool(match["done"])))
        assert match["label"].startswith(f"{prepared['export_id']}/"), match[0]
    expected = {p["partition"]: p["records"] for p in prepared["participants"]}
    assert sorted(seen) == sorted(expected), (seen, expected)
    for partition, lines in seen.items():
        counts = [rows for rows, _ in lines[:-1]]
        assert len(counts) >= 2 and counts == sorted(set(counts)), lines  # rising, batch by batch
        assert lines[-1] == (expected[partition], True), lines  # the last line: done, all rows
    report, _ = assert_exactly_once(protocol, bootstrap, topic, committed=ROWS, aborted=0)
    assert [p.commit_markers for p in report.partitions.values()] == [1, 1], report.partitions
