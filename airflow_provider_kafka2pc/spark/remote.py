"""The prepare run in this process, on a Spark Connect session.

The same spec and outcome as the spark-submit application (:mod:`.app`): a manifest at
``manifest`` holding every committable, or, for a loss repair whose source changed or is
gone, a manifest saying why it refused. The differences are that the driver program is this
process (no JVM launch, the Kafka and registry settings stay in memory here) and that
failures raise instead of exiting.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.errors import AnalysisException

from ..errors import ConfigurationError, Kafka2pcError, SourceChangedError
from ..transaction.manifest import Manifest
from .app import read_source
from .connect import write_manifest
from .export_spec import ExportSpec
from .prepare import Repair, prepare_export

log = logging.getLogger(__name__)


class RepairRefusedError(Kafka2pcError):
    """A loss repair wrote nothing: the source changed or is gone (its manifest says why)."""


def prepare_remote(
    spark: Any,
    spec: ExportSpec,
    *,
    transactional_ids: Sequence[str],
    manifest: str,
    job_label: str | None,
    producer_config: Mapping[str, Any],
    registry: Mapping[str, Any] | None = None,
    repair: Repair | None = None,
) -> Manifest:
    """Run the prepare ``spec`` describes on ``spark`` with these settings; write its
    manifest and return it. What Connect cannot do (source splits, the JVM writer on a
    server without our jar) is refused by :func:`~.prepare.prepare_export` with its reason,
    never dropped.

    :raises RepairRefusedError: a repair refused to write (its manifest holds the reason).
    :raises Kafka2pcError: the prepare failed; the ids may hold open transactions.
    """
    try:
        source = read_source(spark, spec.source or {})
    except AnalysisException as exc:
        if repair is None:
            raise ConfigurationError(f"the source cannot be read: {exc}") from None
        raise _refuse(
            spec, manifest, job_label, repair, f"the source cannot be read any more: {exc}", ()
        ) from None
    try:
        batch = prepare_export(
            source,
            spec,
            transactional_ids=transactional_ids,
            producer_config=dict(producer_config),
            registry=registry,
            job_label=job_label,
            repair=repair,
        )
    except SourceChangedError as exc:
        raise _refuse(spec, manifest, job_label, repair, str(exc), exc.partition_rows) from None
    write_manifest(manifest, batch)
    return batch


def prepare_remote_argv(
    spark: Any,
    argv: Sequence[str],
    producer_config: Mapping[str, Any],
    registry: Mapping[str, Any] | None = None,
) -> Manifest:
    """:func:`prepare_remote` of the application's command line (``--spec-file`` or the
    spec's flags, and the run's): a prepare on Connect run by hand, or by a benchmark."""
    from .app import parse_args, repair_of, transactional_ids
    from .export_spec import from_arguments

    args = parse_args(argv)
    return prepare_remote(
        spark,
        from_arguments(args),
        transactional_ids=transactional_ids(args),
        manifest=args.manifest,
        job_label=args.job_label,
        producer_config=producer_config,
        registry=registry,
        repair=repair_of(args),
    )


def _refuse(
    spec: ExportSpec,
    manifest: str,
    job_label: str | None,
    repair: Repair | None,
    why: str,
    partition_rows: Sequence[int],
) -> RepairRefusedError:
    """Write the refusing manifest the operator reads; the error to raise."""
    partitions = list(repair.partitions) if repair else []
    log.error("refusing to re-prepare partitions %s: %s", partitions, why)
    write_manifest(
        manifest,
        Manifest(
            job_label=job_label,
            topic=spec.route.topic,
            topics=spec.route.topics,
            committables=(),
            source_rows=0,
            partition_rows=tuple(partition_rows),
            metadata={"refused": why, "partitions": partitions},
        ),
    )
    return RepairRefusedError(why)
