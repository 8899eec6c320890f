"""The prepare application run in this process, on a Spark Connect session.

The same arguments as the spark-submit application (:mod:`.app`) and the same outcome:
a manifest at ``--manifest`` holding every committable, or, for a loss repair whose
source changed or is gone, a manifest saying why it refused. The differences are that
the driver program is this process (no JVM launch, the Kafka settings stay in memory
here: no ``--kafka-config-file``) and that failures raise instead of exiting.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.errors import AnalysisException

from ..errors import Kafka2pcError, SourceChangedError
from ..transaction.manifest import Manifest
from ..transaction.routing import routing
from .app import parse_args, read_source, requested_partitioning, wire_options
from .connect import write_manifest
from .prepare import Repair, prepare_dataframe

log = logging.getLogger(__name__)


class RepairRefusedError(Kafka2pcError):
    """A loss repair wrote nothing: the source changed or is gone (its manifest says why)."""


def prepare_remote(spark: Any, argv: Sequence[str], producer_config: Mapping[str, Any]) -> Manifest:
    """Run the prepare described by ``argv`` (the application's options) on ``spark``
    with ``producer_config``; write its manifest and return it.

    :raises RepairRefusedError: a repair refused to write (its manifest holds the reason).
    :raises Kafka2pcError: the prepare failed; the ids may hold open transactions.
    """
    args = parse_args(argv)
    repair = args.only_partitions is not None
    try:
        source = read_source(spark, args)
    except AnalysisException as exc:
        if not repair:
            raise
        raise _refuse(args, f"the source cannot be read any more: {exc}", ()) from None
    try:
        batch = prepare_dataframe(
            source,
            topic=args.topic,
            topic_column=args.topic_column,
            topics=args.topics,
            transactional_ids=[t.strip() for t in args.transactional_ids.split(",") if t.strip()],
            producer_config=dict(producer_config),
            key_column=args.key_column,
            value_column=args.value_column,
            header_columns=args.header_columns,
            transaction_timeout_ms=args.transaction_timeout_ms,
            job_label=args.job_label,
            progress_interval_s=args.progress_interval_s,
            align_with_kafka=args.align_with_kafka,
            # As the application passes them: what Connect cannot do (source splits, the
            # JVM writer on a server without our jar) is refused by prepare_dataframe with
            # its reason, never dropped.
            wire=wire_options(args),
            writer=args.writer,
            partitioning=requested_partitioning(args),
            repair=Repair(args.only_partitions, args.expected_partition_rows, args.partitioning)
            if repair
            else None,
        )
    except SourceChangedError as exc:
        raise _refuse(args, str(exc), exc.partition_rows) from None
    write_manifest(args.manifest, batch)
    return batch


def _refuse(args: Any, why: str, partition_rows: Sequence[int]) -> RepairRefusedError:
    """Write the refusing manifest the operator reads; the error to raise."""
    log.error("refusing to re-prepare partitions %s: %s", args.only_partitions, why)
    write_manifest(
        args.manifest,
        Manifest(
            job_label=args.job_label or "",
            topic=routing(args.topic, args.topic_column, args.topics).topic,
            topics=routing(args.topic, args.topic_column, args.topics).topics,
            committables=(),
            source_rows=0,
            partition_rows=tuple(partition_rows),
            metadata={"refused": why, "partitions": list(args.only_partitions)},
        ),
    )
    return RepairRefusedError(why)
