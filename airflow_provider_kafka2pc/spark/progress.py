"""Per-partition progress of a long prepare, written by the executors at a steady interval.

After each Arrow batch a partition hands to its producer, :class:`PartitionProgress` writes
one line to the Python worker's stderr when ``interval_s`` has passed since its last line,
and one final line once the partition's records are delivered. The lines say rows written
and the rate, not a share: the prepare reads its input once, so no partition's total is
known before its last row (a counting pass first would cost about a fifth of the export;
docs/performance.md). Where the lines land is Spark's doing: with ``local[*]``
(and client-mode executors on the driver's host) the Python workers' stderr is the
spark-submit process's, which ``SparkSubmitOperator`` copies into the task log; on a cluster
it is in each executor's log (the Spark UI), since executors cannot reach the task log.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

#: How each line starts, so a log search finds them all.
PREFIX = "kafka2pc progress"


class PartitionProgress:
    """Reports rows written per partition, at most once per ``interval_s``, then when done.

    Pickled into every task: its clock and last line are per task, on the executor.
    """

    def __init__(self, job_label: str, interval_s: float) -> None:
        self.job_label = job_label
        self.interval_s = interval_s
        self._started: float | None = None
        self._first_rows = 0
        self._last = 0.0

    def __call__(self, partition: int, attempt: int, rows: int) -> None:
        now = time.monotonic()
        if self._started is None:  # the task's first batch: the clock starts here
            self._started, self._first_rows = now, rows
        if now - self._last < self.interval_s:
            return
        self._last = now
        self.write(partition, attempt, rows, self._rate(now, rows))

    def done(self, partition: int, attempt: int, rows: int) -> None:
        """The partition's records are all delivered: its last line, always written."""
        self.write(partition, attempt, rows, self._rate(time.monotonic(), rows), done=True)
        self._started, self._last = None, 0.0  # a reused worker's next task starts afresh

    def _rate(self, now: float, rows: int) -> float | None:
        if self._started is None:
            return None
        elapsed = now - self._started
        return (rows - self._first_rows) / elapsed if elapsed > 0 else None

    def write(
        self,
        partition: int,
        attempt: int,
        rows: int,
        rate: float | None,
        stream: TextIO | None = None,
        *,
        done: bool = False,
    ) -> None:
        speed = f", {rate:,.0f} rows/s" if rate else ""
        retry = f" (task attempt {attempt})" if attempt else ""
        state = "done, " if done else ""
        line = (
            f"{PREFIX} {self.job_label}: partition {partition}{retry}: {state}{rows:,} rows "
            f"written{speed}\n"
        )
        out = stream or sys.stderr
        out.write(line)
        out.flush()
