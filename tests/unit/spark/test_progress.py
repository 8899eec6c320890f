"""Progress lines of a long prepare: at most one per interval per partition, and always a
last one once the partition is delivered."""

from __future__ import annotations

import io

import pytest

from airflow_provider_kafka2pc.spark import progress
from airflow_provider_kafka2pc.spark.progress import PartitionProgress


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    return now


def run(reporter: PartitionProgress, clock: list[float], calls, capsys) -> list[str]:
    """``calls``: (seconds since the task began, partition, rows so far); the last call is
    the partition's end (``done``)."""
    start = clock[0]
    for at, partition, rows in calls[:-1]:
        clock[0] = start + at
        reporter(partition, 0, rows)
    at, partition, rows = calls[-1]
    clock[0] = start + at
    reporter.done(partition, 0, rows)
    return capsys.readouterr().err.splitlines()


@pytest.mark.parametrize(
    ("calls", "expected"),
    [
        pytest.param(
            [(0, 0, 10_000), (1, 0, 20_000), (2, 0, 30_000), (2.5, 0, 30_000)],
            [
                "partition 0: 10,000 rows written",
                "partition 0: done, 30,000 rows written, 8,000 rows/s",
            ],
            id="fast batches: the first line, then none until the end",
        ),
        pytest.param(
            [(0, 0, 10_000), (4, 0, 15_000), (6, 0, 20_000), (11, 0, 25_000), (12, 0, 25_000)],
            [
                "partition 0: 10,000 rows written",
                "partition 0: 15,000 rows written, 1,250 rows/s",
                "partition 0: 25,000 rows written, 1,364 rows/s",
                "partition 0: done, 25,000 rows written, 1,250 rows/s",
            ],
            id="one line per interval, not per batch",
        ),
        pytest.param(
            [(0, 1, 500), (0, 1, 500)],
            ["partition 1: 500 rows written", "partition 1: done, 500 rows written"],
            id="a partition done in one batch says so",
        ),
    ],
)
def test_lines_at_a_steady_interval(clock, capsys, calls, expected):
    reporter = PartitionProgress("orders/2026-11-01#1", interval_s=3.0)
    lines = run(reporter, clock, calls, capsys)
    assert lines == [f"kafka2pc progress orders/2026-11-01#1: {line}" for line in expected]


def test_a_reused_worker_starts_each_task_afresh(clock, capsys):
    reporter = PartitionProgress("x", interval_s=3.0)
    run(reporter, clock, [(0, 0, 100), (1, 0, 100)], capsys)
    clock[0] += 60  # the worker's next task, a minute later
    lines = run(reporter, clock, [(0, 1, 10), (2, 1, 20), (2, 1, 20)], capsys)
    assert lines == [
        "kafka2pc progress x: partition 1: 10 rows written",
        "kafka2pc progress x: partition 1: done, 20 rows written, 5 rows/s",
    ]


def test_a_retried_task_says_which_attempt():
    out = io.StringIO()
    PartitionProgress("x", 1.0).write(2, 1, 5, None, stream=out)
    assert out.getvalue() == "kafka2pc progress x: partition 2 (task attempt 1): 5 rows written\n"
