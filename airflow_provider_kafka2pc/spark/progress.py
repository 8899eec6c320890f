"""Per-partition progress of a long prepare, written by the executors at a steady interval.

An :data:`~.partition_writer.ArrowBatchCallback`: after each Arrow batch a partition hands
to its producer, it writes one line to the Python worker's stderr when ``interval_s`` has
passed since its last line (and always at the partition's last row). The driver knows
every partition's rows before the write job starts, so each line says "rows written of
rows to write". Where the line lands is Spark's doing: with ``local[*]`` (and client-mode
executors on the driver's host) the Python workers' stderr is the spark-submit process's,
which ``SparkSubmitOperator`` copies into the task log; on a cluster it is in each
executor's log (the Spark UI), since executors cannot reach the task log.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TextIO

#: How each line starts, so a log search finds them all.
PREFIX = "kafka2pc progress"


class PartitionProgress:
    """The ``on_batch`` callback that reports rows written of rows to write, per partition.

    Pickled into every task: its clock and last line are per task, on the executor.
    """

    def __init__(self, job_label: str, partition_rows: Sequence[int], interval_s: float) -> None:
        self.job_label = job_label
        self.partition_rows = tuple(partition_rows)
        self.interval_s = interval_s
        self._started: float | None = None
        self._first_rows = 0
        self._last = 0.0

    def __call__(self, partition: int, attempt: int, rows: int) -> None:
        now = time.monotonic()
        if self._started is None:  # the task's first batch: the clock starts here
            self._started, self._first_rows = now, rows
        total = self.partition_rows[partition]
        if rows < total and now - self._last < self.interval_s:
            return
        self._last = now
        elapsed = now - self._started
        rate = (rows - self._first_rows) / elapsed if elapsed > 0 else None
        self.write(partition, attempt, rows, total, rate)

    def write(
        self,
        partition: int,
        attempt: int,
        rows: int,
        total: int,
        rate: float | None,
        stream: TextIO | None = None,
    ) -> None:
        share = 100 * rows / total if total else 100.0
        speed = f", {rate:,.0f} rows/s" if rate else ""
        retry = f" (task attempt {attempt})" if attempt else ""
        line = (
            f"{PREFIX} {self.job_label}: partition {partition}{retry}: {rows:,} of "
            f"{total:,} rows written ({share:.0f}%){speed}\n"
        )
        out = stream or sys.stderr
        out.write(line)
        out.flush()
