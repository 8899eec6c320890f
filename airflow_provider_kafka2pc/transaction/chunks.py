"""Records as the writers take them: one at a time (:data:`Record`) or a column per field
(:class:`RecordChunk`, one Arrow batch), grouped and routed to the write's topics.

Apart from the writer's transaction lifecycle (:mod:`.writer`): the Spark partition
writer and the loss repair's copy (:mod:`.log_copy`) build chunks without a producer.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from ..errors import WriteError

#: A record as the writer takes it: (key, value), (key, value, headers) or
#: (key, value, headers, timestamp): the CreateTime in epoch ms, None for the time of
#: writing. A None value is a tombstone.
Record = (
    tuple[bytes | None, bytes | None]
    | tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None]
    | tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None, int | None]
)

#: Headers of one record: (name, value) pairs, or None for none.
Headers = list[tuple[str, bytes]] | None


@dataclass(frozen=True, slots=True)
class RecordChunk:
    """Records handed to the writer together (one Arrow batch), column by column.

    Why columns: the writer then loops over plain lists in one tight loop per chunk, with
    no per-record tuple, generator step or branch in between (docs/performance.md).
    ``headers`` is None when no record of the chunk has any.
    """

    keys: Sequence[bytes | None]
    values: Sequence[bytes | None]
    headers: Sequence[Headers] | None = None
    #: Per record its CreateTime in epoch ms (None: the time of writing); None for none.
    timestamps: Sequence[int | None] | None = None
    #: Per record the topic partition it must go to; None: the partitioner decides. A loss
    #: repair's copy puts each record back into the partition it was written to.
    partitions: Sequence[int] | None = None
    #: The topic every record of the chunk goes to; None: the write's only topic.
    topic: str | None = None

    def __len__(self) -> int:
        return len(self.values)


#: How many records :meth:`~.writer.TransactionalWriter.write` groups into one chunk.
CHUNK_RECORDS = 1024


def routed(chunks: Iterable[RecordChunk], topics: Sequence[str]) -> Iterator[RecordChunk]:
    """``chunks``, each checked to go to one of ``topics`` (a chunk without a topic goes to
    the only one); a chunk naming another topic fails the write (its transaction aborted)."""
    known = frozenset(topics)
    for chunk in chunks:
        if chunk.topic is None:
            if len(topics) > 1:
                raise WriteError(f"a chunk names no topic; this write goes to {list(topics)}")
        elif chunk.topic not in known:
            raise WriteError(f"a chunk goes to topic {chunk.topic!r}, not among {list(topics)}")
        yield chunk


def chunked(records: Iterable[Record]) -> Iterator[RecordChunk]:
    """Records grouped :data:`CHUNK_RECORDS` at a time, the first alone: the writer takes
    one chunk before it opens the transaction, and that must read no more of the input
    than one record (a failing input then fails inside the transaction, which is aborted).
    """
    iterator = iter(records)
    size = 1
    while chunk := list(itertools.islice(iterator, size)):
        size = CHUNK_RECORDS
        keys = [r[0] for r in chunk]
        values = [r[1] for r in chunk]
        headers = [r[2] if len(r) > 2 else None for r in chunk]  # type: ignore[misc]
        stamps = [r[3] if len(r) > 3 else None for r in chunk]  # type: ignore[misc]
        yield RecordChunk(
            keys,
            values,
            headers if any(h is not None for h in headers) else None,
            stamps if any(len(r) > 3 for r in chunk) else None,
        )
