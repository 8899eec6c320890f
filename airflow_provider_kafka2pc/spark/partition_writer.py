"""Executor side: one Spark partition becomes one prepared Kafka transaction.

The function runs inside ``mapInArrow`` on Python workers. Rows arrive as Arrow
record batches already reduced to binary key/value/header columns by Spark (the
JSON encoding happens in the JVM), so Python only hands bytes to librdkafka and
memory stays flat however large the partition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import WriteError
from ..transaction.chunks import RecordChunk
from ..transaction.writer import TransactionalWriter
from .connect import executor_settings

if TYPE_CHECKING:
    from .progress import PartitionProgress

KEY = "__kafka2pc_key"
VALUE = "__kafka2pc_value"
HEADER_PREFIX = "__kafka2pc_header_"
#: The record timestamp (epoch ms, null: the time of writing), when the export sets one.
TIMESTAMP = "__kafka2pc_timestamp"
#: Each row's topic, when the export routes rows among several (``topic_column``).
TOPIC = "__kafka2pc_topic"

#: Called on the executor after each Arrow batch: (partition, attempt, rows so far).
ArrowBatchCallback = Callable[[int, int, int], None]

#: What each task returns to the driver: one row per partition.
RESULT_SCHEMA = "partition INT, attempt INT, input_rows LONG, committable STRING"


def partition_writer(
    transactional_ids: Sequence[str],
    producer_config: Mapping[str, Any],
    topic: str | Sequence[str],
    transaction_timeout_ms: int,
    header_names: Sequence[str],
    on_batch: ArrowBatchCallback | None = None,
    progress: PartitionProgress | None = None,
    batch_produce: bool = False,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Build the ``mapInArrow`` function; everything it closes over is picklable.

    ``on_batch`` runs after each Arrow batch is queued (a fault injected there comes before
    the progress line); ``progress`` gets every batch and, once delivered, the last count;
    ``batch_produce``: see :class:`~..transaction.writer.TransactionalWriter`. ``topic``
    a list: the rows carry their topic in :data:`TOPIC`, and each transaction spans them.
    """
    topic = topic if isinstance(topic, str) else list(topic)
    ids = list(transactional_ids)
    config = dict(producer_config)
    headers = list(header_names)

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId()
        attempt = context.attemptNumber()
        counter = _Counter()
        hooks = [h for h in (on_batch, progress) if h is not None]
        hook = None
        if hooks:

            def hook(rows: int) -> None:
                for each in hooks:
                    each(partition, attempt, rows)

        # A retried task re-initialises the same id: that fences (aborts) the failed
        # attempt's transaction before this attempt writes anything.
        writer = TransactionalWriter(
            executor_settings(config),
            ids[partition],
            transaction_timeout_ms=transaction_timeout_ms,
            batch_produce=batch_produce,
        )
        committable = writer.write_chunks(topic, _chunks(batches, headers, counter, hook))
        if committable.record_count != counter.rows:
            raise WriteError(
                f"partition {partition}: {counter.rows} rows in, {committable.record_count} "
                "delivered; the transaction stays open for the orchestrator to abort"
            )
        if progress is not None:
            progress.done(partition, attempt, counter.rows)
        yield result_batch(partition, attempt, counter.rows, committable.to_json())

    return write_partition


def result_batch(partition: int, attempt: int, input_rows: int, committable: str) -> pa.RecordBatch:
    """The one row a task reports to the driver, typed as :data:`RESULT_SCHEMA` says."""
    return pa.RecordBatch.from_pylist(
        [
            {
                "partition": partition,
                "attempt": attempt,
                "input_rows": input_rows,
                "committable": committable,
            }
        ],
        schema=pa.schema(
            [
                ("partition", pa.int32()),
                ("attempt", pa.int32()),
                ("input_rows", pa.int64()),
                ("committable", pa.string()),
            ]
        ),
    )


class _Counter:
    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows = 0


def _chunks(
    batches: Iterator[pa.RecordBatch],
    header_names: Sequence[str],
    counter: _Counter,
    hook: Callable[[int], None] | None,
) -> Iterator[RecordChunk]:
    """Each Arrow batch as one chunk of columns: one ``to_pylist`` per column, no
    per-record tuple; headers are built per record only for a batch that has some. A batch
    whose rows go to several topics becomes one chunk per topic (Arrow filters, in order)."""
    for batch in batches:
        if TOPIC in batch.schema.names:
            routed = batch.column(TOPIC)
            for topic in pc.unique(routed).to_pylist():
                yield _chunk(batch.filter(pc.equal(routed, topic)), header_names, topic)
        else:
            yield _chunk(batch, header_names, None)
        counter.rows += batch.num_rows
        if hook is not None:
            hook(counter.rows)


def _chunk(batch: pa.RecordBatch, header_names: Sequence[str], topic: str | None) -> RecordChunk:
    keys = batch.column(KEY).to_pylist()
    values = batch.column(VALUE).to_pylist()
    stamps = batch.column(TIMESTAMP).to_pylist() if TIMESTAMP in batch.schema.names else None
    return RecordChunk(keys, values, _headers(batch, header_names), stamps, topic=topic)


def _headers(batch: pa.RecordBatch, header_names: Sequence[str]) -> list[Any] | None:
    """Per record, its non-null headers as (name, value) pairs; None when the batch has none."""
    present = [
        (name, batch.column(HEADER_PREFIX + name))
        for name in header_names
        if batch.column(HEADER_PREFIX + name).null_count < batch.num_rows
    ]
    if not present:
        return None
    columns = [(name, column.to_pylist()) for name, column in present]
    return [
        [(name, values[i]) for name, values in columns if values[i] is not None]
        for i in range(batch.num_rows)
    ]
