"""Which topics an export writes: one ``topic``, or a ``topic_column`` routing each row
among the ``topics`` declared up front.

Why declared up front: every topic is checked (exists, writable) before any transaction
opens, and the DAG names its assets and OpenLineage outputs at parse time, without reading
the data. A row naming a topic outside the list is refused like a null required key:
nothing is written. A transaction spans every topic its rows go to (Kafka adds each
topic-partition with ``AddPartitionsToTxn``), so the export still commits or aborts as one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConfigurationError

#: Kafka's own rule for topic names (``org.apache.kafka.common.internals.Topic``).
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


@dataclass(frozen=True)
class Routing:
    """The export's topics (in declared order) and the column naming each row's topic
    (None: every row goes to ``topics[0]``, the only one)."""

    topics: tuple[str, ...]
    column: str | None = None

    @property
    def topic(self) -> str:
        """The first topic: what a one-topic record (the ledger's ``topic``) shows."""
        return self.topics[0]

    @property
    def several(self) -> bool:
        return self.column is not None


def check_topic_name(topic: object, field: str = "topic") -> str:
    """``topic`` if Kafka accepts it as a topic name, else a clear error."""
    if not isinstance(topic, str) or not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise ConfigurationError(
            f"{field} must be a Kafka topic name (1-249 characters from A-Z a-z 0-9 . _ -), "
            f"got {topic!r}"
        )
    return topic


def routing(
    topic: str | None = None,
    topic_column: str | None = None,
    topics: Sequence[str] | None = None,
) -> Routing:
    """Exactly one of ``topic`` and ``topic_column``; with ``topic_column``, ``topics``
    lists every topic its values may name (at least one, no duplicate)."""
    if (topic is None) == (topic_column is None):
        raise ConfigurationError(
            "give exactly one of topic (every row to one topic) and topic_column (each row "
            f"names its topic, among topics=[...]); got topic={topic!r}, "
            f"topic_column={topic_column!r}"
        )
    if topic is not None:
        if topics is not None and list(topics) != [topic]:
            raise ConfigurationError(
                f"topics={list(topics)!r} goes with topic_column; with topic={topic!r} leave it out"
            )
        return Routing((check_topic_name(topic),))
    if not isinstance(topic_column, str) or not topic_column:
        raise ConfigurationError(f"topic_column must be a column name, got {topic_column!r}")
    if topics is None or isinstance(topics, str) or not list(topics):
        raise ConfigurationError(
            f"topic_column={topic_column!r} needs topics=[...]: every topic its values may "
            "name, declared up front (checked before anything opens, and the DAG's assets)"
        )
    named = tuple(check_topic_name(t, "topics[]") for t in topics)
    if len(set(named)) != len(named):
        raise ConfigurationError(f"topics names a topic twice: {list(named)}")
    return Routing(named, topic_column)
