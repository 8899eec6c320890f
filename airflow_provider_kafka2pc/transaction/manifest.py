"""The prepared batch: every participant's committable of one export run, plus its provenance.

It is the manifest the prepare phase hands to the decide phase. It carries no Spark
types, so the orchestrator reads it without Spark.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import CommittableError
from .committable import Committable

MANIFEST_SCHEMA_VERSION = 1

#: How a prepare partitioned its rows into transactions (``metadata["partitioning"]``, and
#: the ledger's record of it, which a loss repair follows): each Spark partition owning a
#: fixed set of Kafka partitions, Spark's hash of the key (or of the whole record), or the
#: source's own file splits, unshuffled (``metadata["source_splits"]`` then records what a
#: repair needs to recompute them: docs/partitioning.md).
ALIGNED = "kafka-aligned"
HASH = "hash"
SOURCE = "source-splits"
PARTITIONINGS = (ALIGNED, HASH, SOURCE)


@dataclass(frozen=True)
class Manifest:
    """All committables of one run; ``committables[i]`` belongs to Spark partition ``i``.

    ``topic`` is the first of ``topics``, every topic the export writes (a ``topic_column``
    routes rows among several; a manifest written before several were possible reads as
    its one topic)."""

    #: What the prepare job called itself (``export/run key#attempt``), for its logs.
    job_label: str
    topic: str
    committables: tuple[Committable, ...]
    source_rows: int
    partition_rows: tuple[int, ...]
    metadata: dict[str, Any] = field(default_factory=dict)
    topics: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.topics:
            object.__setattr__(self, "topics", (self.topic,))
        elif self.topics[0] != self.topic:
            raise CommittableError(
                f"manifest topic {self.topic!r} is not the first of its topics {self.topics}"
            )

    def records_per_topic(self) -> dict[str, int]:
        """Records prepared per topic, over every committable's ranges (each declared
        topic listed, 0 when no row went to it)."""
        counts = dict.fromkeys(self.topics, 0)
        for committable in self.committables:
            for part in committable.partitions:
                counts[part.topic] = counts.get(part.topic, 0) + part.record_count
        return counts

    @property
    def record_count(self) -> int:
        return sum(c.record_count for c in self.committables)

    @property
    def is_empty(self) -> bool:
        return self.source_rows == 0

    @property
    def partitioning(self) -> str | None:
        """:data:`ALIGNED`, :data:`HASH` or :data:`SOURCE`; None from a prepare that did not
        say."""
        return self.metadata.get("partitioning")

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": MANIFEST_SCHEMA_VERSION,
            "job_label": self.job_label,
            "topic": self.topic,
            "topics": list(self.topics),
            "source_rows": self.source_rows,
            "partition_rows": list(self.partition_rows),
            "record_count": self.record_count,
            "committables": [c.to_dict() for c in self.committables],
            "metadata": self.metadata,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CommittableError(f"manifest is not valid JSON: {exc}") from exc
        if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA_VERSION:
            raise CommittableError(f"manifest field 'schema' must be {MANIFEST_SCHEMA_VERSION}")
        for name in ("job_label", "topic"):
            if not isinstance(data.get(name), str):
                raise CommittableError(f"manifest field {name!r} must be a string")
        rows = data.get("partition_rows")
        if not isinstance(rows, list) or not all(isinstance(n, int) for n in rows):
            raise CommittableError("manifest field 'partition_rows' must be a list of integers")
        topics = data.get("topics", [data["topic"]])
        if not isinstance(topics, list) or not all(isinstance(t, str) and t for t in topics):
            raise CommittableError("manifest field 'topics' must be a list of topic names")
        committables = data.get("committables")
        if not isinstance(committables, list):
            raise CommittableError("manifest field 'committables' must be a list")
        batch = cls(
            job_label=data["job_label"],
            topic=data["topic"],
            committables=tuple(Committable.from_dict(c) for c in committables),
            source_rows=int(data.get("source_rows", -1)),
            partition_rows=tuple(rows),
            metadata=dict(data.get("metadata") or {}),
            topics=tuple(topics),
        )
        if batch.record_count != batch.source_rows:
            raise CommittableError(
                f"manifest 'source_rows' ({batch.source_rows}) differs from the committables' "
                f"record count ({batch.record_count})"
            )
        return batch
