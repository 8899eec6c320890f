"""The export's record timestamps against what its topics keep, before anything opens.

A topic's time retention deletes a segment whose newest timestamp is older than
``retention.ms`` at its next check, minutes after the commit; a timestamp outside
``message.timestamp.before/after.max.ms`` fails the write. Both are decided here from the
oldest and newest value of ``timestamp_column`` (per topic, where rows are routed), read by
one aggregation of the source, and the topics' settings
(:func:`~..transaction.topic_configs.check_record_timestamps`). The aggregation costs one
pass over the source, only for an export with a ``timestamp_column``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..protocol.client import KafkaProtocol
from ..transaction.retention import TimestampSpan
from ..transaction.topic_configs import check_record_timestamps
from .export_spec import ExportSpec
from .wire import timestamp_value

log = logging.getLogger(__name__)


def timestamp_spans(df: DataFrame, spec: ExportSpec) -> dict[str, TimestampSpan]:
    """The oldest and newest record timestamp (epoch ms) per topic; a topic whose rows
    carry none is absent. A value before 1970 fails here, as in the write, by its mark."""
    route = spec.route
    millis = timestamp_value(df, str(spec.timestamp_column))
    topic = F.col(route.column) if route.several else F.lit(route.topic)
    rows = (
        df.select(topic.alias("topic"), millis.alias("ms"))
        .groupBy("topic")
        .agg(F.min("ms").alias("oldest"), F.max("ms").alias("newest"))
        .collect()
    )
    return {
        r["topic"]: TimestampSpan(int(r["oldest"]), int(r["newest"]))
        for r in rows
        if r["oldest"] is not None and r["topic"] in route.topics
    }


def check_timestamps(
    df: DataFrame, spec: ExportSpec, producer_config: Mapping[str, Any], job_label: str
) -> None:
    """Refuse (:class:`~..errors.TimestampRefusedError`) timestamps the topics would delete
    at once or reject, unless ``spec.allow_expiring_timestamps`` lets the former through."""
    if spec.timestamp_column is None:
        return
    spans = timestamp_spans(df, spec)
    if not spans:
        return
    with KafkaProtocol(producer_config) as protocol:
        notes = check_record_timestamps(
            protocol,
            list(spec.route.topics),
            None,
            None,
            spec.timestamp_column,
            allow_expiring=spec.allow_expiring_timestamps,
            spans=spans,
        )
    for note in notes:
        log.info("run %s: %s", job_label, note)
