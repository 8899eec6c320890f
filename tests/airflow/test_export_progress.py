"""A prepare's per-partition progress reaches the task log: the executors' lines, from the
spark-submit output that ``SparkSubmitOperator`` copies into the log (Spark ``local[2]``).

The interval is tiny here so that every Arrow batch (10,000 rows) writes a line; that lines
come at most once per interval is ``tests/unit/spark/test_progress.py``'s."""

from __future__ import annotations

import re

from tests.conftest import assert_exactly_once

ROWS = 60_000
LINE = re.compile(
    r"kafka2pc progress (?P<label>\S+): partition (?P<partition>\d+): "
    r"(?P<rows>[\d,]+) of (?P<total>[\d,]+) rows written \((?P<share>\d+)%\)"
)


def test_prepare_logs_rows_written_of_rows_to_write_per_partition(
    export_dag, run_export, make_topic, protocol, bootstrap, capfd
):
    topic = make_topic(2)
    dag = export_dag(topic=topic, rows=ROWS, prepare_kwargs={"progress_interval_s": 0.001})

    result = run_export(dag, day=3)

    assert result.state == "success", result
    prepared = result.xcom("prepare")
    out, err = capfd.readouterr()
    seen: dict[int, list[tuple[int, int]]] = {}
    for match in LINE.finditer(out + err):
        rows, total = (int(match[k].replace(",", "")) for k in ("rows", "total"))
        seen.setdefault(int(match["partition"]), []).append((rows, total))
        assert match["label"].startswith(f"{prepared['export_id']}/"), match[0]
    expected = {p["partition"]: p["records"] for p in prepared["participants"]}
    assert sorted(seen) == sorted(expected), (seen, expected)
    for partition, lines in seen.items():
        counts = [rows for rows, _ in lines]
        assert len(lines) >= 2 and counts == sorted(set(counts)), lines  # rising, batch by batch
        assert {total for _, total in lines} == {expected[partition]}, lines
        assert counts[-1] == expected[partition], lines  # the last line: all of them
    assert_exactly_once(protocol, bootstrap, topic, committed=ROWS, aborted=0)
