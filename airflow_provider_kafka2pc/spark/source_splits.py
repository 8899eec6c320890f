"""Source-split partitioning: each transaction writes one of the source's own file splits.

No shuffle: the rows stay in the splits Spark's file source reads them in, coalesced to at
most one split per transactional id, as Spark's own Kafka sink writes them. Membership is
then a function of the files and of the split settings, not of the rows, so the prepare
pins those settings and records them (:class:`SourceSplits`, kept in the ledger) with a
fingerprint of the input files and a digest of which byte ranges each partition reads.
A loss repair sets the recorded settings, recomputes the layout and refuses
(:class:`~..errors.SourceChangedError`) before any transaction opens when either differs.

Only a plan that reads one file source through row-wise operators (project, filter) has
such splits; anything else (a shuffle, a join, a generated range, an in-memory table) is
reported by :func:`why_not_splittable` and the prepare partitions as it would without
this option (docs/partitioning.md).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from pyspark.sql import DataFrame, SparkSession

from ..errors import ConfigurationError, SourceChangedError

#: Settings that decide how a file source is split (Spark's ``FilePartition``): pinned at
#: the prepare and set again by a repair. ``minPartitionNum`` unset means "the cores", which
#: differ between sessions: the prepare pins it to the number of ids.
SPLIT_SETTINGS = (
    "spark.sql.files.maxPartitionBytes",
    "spark.sql.files.openCostInBytes",
    "spark.sql.files.minPartitionNum",
    "spark.sql.files.maxPartitionNum",
)
#: Block locations steer a coalesce's grouping; without them it groups contiguous splits.
#: Read when the files are listed, so the spark-submit application sets it before reading.
IGNORE_LOCALITY = "spark.sql.sources.ignoreDataLocality"
MIN_PARTITION_NUM = "spark.sql.files.minPartitionNum"

#: Physical operators that keep each row in the split it was read from.
_ROW_WISE = frozenset(
    {
        "ProjectExec",
        "FilterExec",
        "ColumnarToRowExec",
        "InputAdapter",
        "WholeStageCodegenExec",
    }
)
_FILE_SCAN = "FileSourceScanExec"
_Prepare = TypeVar("_Prepare", bound=Callable[..., Any])


@dataclass(frozen=True)
class SourceSplits:
    """What recomputing a source-split prepare's partitions needs (the ledger's record)."""

    #: :data:`SPLIT_SETTINGS` as pinned (None: unset, Spark's default).
    settings: Mapping[str, str | None]
    #: The source's file splits, before the coalesce.
    splits: int
    #: Spark partitions written (<= the ids; the ids beyond hold empty participants).
    partitions: int
    #: sha256 of the input files' paths, sizes and modification times.
    fingerprint: str
    #: sha256 of each partition's (path, start, length) ranges, in order.
    layout: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": dict(self.settings),
            "splits": self.splits,
            "partitions": self.partitions,
            "fingerprint": self.fingerprint,
            "layout": self.layout,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SourceSplits:
        try:
            settings = dict(data["settings"])
            unknown = sorted(set(settings) - set(SPLIT_SETTINGS))
            if unknown:
                raise ValueError(f"unknown settings {unknown}")
            return cls(
                settings={k: None if v is None else str(v) for k, v in settings.items()},
                splits=int(data["splits"]),
                partitions=int(data["partitions"]),
                fingerprint=str(data["fingerprint"]),
                layout=str(data["layout"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"the recorded source splits are malformed ({exc}): the repair cannot "
                "recompute the partitions; nothing was written"
            ) from None


@contextmanager
def settings_restored(spark: SparkSession) -> Iterator[None]:
    """The split settings as they were, once the block ends: a prepare pins them for its
    own plan, and the caller's next prepare must not take that pin for the caller's own."""
    before = {key: spark.conf.get(key, None) for key in SPLIT_SETTINGS}
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def restoring_settings(prepare: _Prepare) -> _Prepare:
    """Decorate a ``prepare(df, ...)`` so its session's split settings outlive it unchanged."""

    @functools.wraps(prepare)
    def restoring(df: DataFrame, *args: Any, **kwargs: Any) -> Any:
        with settings_restored(df.sparkSession):
            return prepare(df, *args, **kwargs)

    return restoring  # type: ignore[return-value]


def why_not_splittable(df: DataFrame) -> str | None:
    """None when ``df`` reads one file source through row-wise operators only; else why
    its partitions cannot be pinned (the name of the first operator that moves rows)."""
    plan = _fresh(df)._jdf.queryExecution().executedPlan()
    scans = 0
    pending = [plan]
    while pending:
        node = pending.pop()
        name = node.getClass().getSimpleName()
        if name == _FILE_SCAN:
            scans += 1
        elif name not in _ROW_WISE:
            return (
                f"the source's plan has {node.nodeName()} ({name}), whose partitions depend "
                "on more than the files and the split settings: only a file source read "
                "through filters and projections keeps its splits"
            )
        children = node.children()
        pending.extend(children.apply(i) for i in range(children.size()))
    if scans != 1:
        return f"the source reads {scans} file sources; source splits need exactly one"
    return None


def pin_settings(
    spark: SparkSession, partitions: int, recorded: Mapping[str, str | None] | None = None
) -> dict[str, str | None]:
    """Set the split settings on the session: ``recorded`` ones (a repair), else the
    session's own with ``minPartitionNum`` defaulting to ``partitions``. Returns them."""
    if recorded is None:
        settings = {key: spark.conf.get(key, None) for key in SPLIT_SETTINGS}
        settings[MIN_PARTITION_NUM] = settings[MIN_PARTITION_NUM] or str(partitions)
    else:
        settings = {key: recorded.get(key) for key in SPLIT_SETTINGS}
    for key, value in settings.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)
    return settings


def describe(
    source: DataFrame, prepared: DataFrame, settings: Mapping[str, str | None]
) -> SourceSplits:
    """The record of ``prepared`` (``source`` encoded and coalesced), computed by planning
    it (no job runs): its splits, the files' fingerprint and each partition's ranges."""
    splits = _file_partitions(prepared)
    ranges = [[file for split in partition for file in split] for partition in splits]
    return SourceSplits(
        settings=dict(settings),
        # Counted on the same walk: planning the source again cost the driver 0.2 s.
        splits=sum(len(partition) for partition in splits),
        partitions=len(ranges),
        fingerprint=files_fingerprint(source),
        layout=_digest(ranges),
    )


def describe_meanwhile(
    source: DataFrame, prepared: DataFrame, settings: Mapping[str, str | None]
) -> Future[SourceSplits]:
    """:func:`describe` on a thread, started before the write job: only the manifest needs
    the record, and planning it (close to half of the driver's time between the source's
    read and the write, docs/performance.md) then overlaps the job instead of delaying it.
    Wait for it before the split settings are restored."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="kafka2pc-splits")
    try:
        return pool.submit(describe, source, prepared, settings)
    finally:
        pool.shutdown(wait=False)


def check_unchanged(now: SourceSplits, recorded: SourceSplits) -> None:
    """Refuse a repair whose input files or split layout differ from the prepare's."""
    changed = [
        what
        for what, differs in (
            (
                "the input files (paths, sizes, modification times)",
                now.fingerprint != recorded.fingerprint,
            ),
            (
                f"the split layout ({now.splits} splits in {now.partitions} partitions now, "
                f"{recorded.splits} in {recorded.partitions} recorded)",
                now.layout != recorded.layout,
            ),
        )
        if differs
    ]
    if changed:
        raise SourceChangedError(
            f"the source changed since the batch was prepared: {' and '.join(changed)} "
            "differ from the prepare's: its partitions cannot be recomputed, nothing was "
            "written",
            (),
        )


def files_fingerprint(df: DataFrame) -> str:
    """sha256 of the input files' (path, size, modification time), sorted by path."""
    spark = df.sparkSession
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    entries = []
    for path in sorted(df.inputFiles()):
        hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
        status = hadoop_path.getFileSystem(conf).getFileStatus(hadoop_path)
        entries.append([path, status.getLen(), status.getModificationTime()])
    return _digest(entries)


def _file_partitions(prepared: DataFrame) -> list[list[list[list[Any]]]]:
    """Each partition's source splits (Spark's ``FilePartition``), each a list of its file
    ranges ``[path, start, length]``, found by walking the planned RDDs' narrow
    dependencies down to the file scan; a shuffle on the way is refused."""
    spark = prepared.sparkSession
    narrow = spark.sparkContext._jvm.java.lang.Class.forName("org.apache.spark.NarrowDependency")
    rdd = prepared._jdf.queryExecution().toRdd()
    return [_splits(rdd, i, narrow) for i in range(rdd.getNumPartitions())]


def _splits(rdd: Any, index: int, narrow: Any) -> list[list[list[Any]]]:
    partition = rdd.partitions()[index]
    if partition.getClass().getSimpleName() == "FilePartition":
        return [[[str(f.filePath().toString()), f.start(), f.length()] for f in partition.files()]]
    found: list[list[list[Any]]] = []
    dependencies = rdd.dependencies()
    for d in range(dependencies.size()):
        dependency = dependencies.apply(d)
        if not narrow.isInstance(dependency):
            raise ConfigurationError("the source-split input has a shuffle: cannot pin it")
        parents = dependency.getParents(index)
        for p in range(parents.size()):
            found.extend(_splits(dependency.rdd(), parents.apply(p), narrow))
    return found


def _fresh(df: DataFrame) -> DataFrame:
    """``df`` planned anew: a DataFrame keeps the plan it was first planned with, under the
    settings of that moment, and the split settings may have been pinned since."""
    return df.alias("kafka2pc_source")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, separators=(",", ":")).encode()).hexdigest()
