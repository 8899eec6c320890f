"""The three writers of a prepare, one class each with one :meth:`write`: the plan
(:mod:`.plan`) chose one; :mod:`.prepare` hands it the encoded, partitioned input.

* :class:`PythonWriter`: confluent-kafka in Spark's Python workers (``mapInArrow``,
  :mod:`.partition_writer`);
* :class:`JvmWriter`: Kafka's Java producer inside the executors, called through py4j on a
  classic session (:mod:`.jvm_writer`);
* :class:`DataSourceWriter`: the same Java writer through the project's DataSource V2
  format ``kafka2pc`` on Spark Connect (:mod:`.connect_jvm`).

Each ``write(data, only)`` runs one Spark job over ``data`` (``only``: those partition
indexes write, the others read and write nothing) and returns one result row per written
partition (:data:`.partition_writer.RESULT_SCHEMA`'s fields). Which rows a transaction
holds does not depend on the writer, so a loss repair may use another one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pyspark.sql import DataFrame

from .connect import is_connect, ship_settings
from .connect_jvm import connect_jvm_write
from .jvm_writer import JVM, PYTHON, jvm_write
from .partition_writer import RESULT_SCHEMA, ArrowBatchCallback, partition_writer
from .plan import PreparePlan
from .progress import PartitionProgress


class TransactionWriter(Protocol):
    """Writes each partition of the input into its own open Kafka transaction."""

    name: str

    def write(self, data: DataFrame, only: Sequence[int] | None) -> list[Any]: ...


@dataclass(frozen=True)
class PythonWriter:
    """confluent-kafka in Spark's Python workers, one ``mapInArrow`` task per partition."""

    plan: PreparePlan
    producer_config: Mapping[str, Any] = field(repr=False)
    on_batch: ArrowBatchCallback | None = None
    name: str = PYTHON

    def write(self, data: DataFrame, only: Sequence[int] | None) -> list[Any]:
        spec, spark = self.plan.spec, data.sparkSession
        route = spec.route
        writer = partition_writer(
            list(self.plan.ids),
            # On Connect the function is pickled into the plan: secrets and files go apart.
            ship_settings(spark, self.producer_config)
            if is_connect(spark)
            else self.producer_config,
            list(route.topics) if route.several else route.topic,
            spec.transaction_timeout_ms,
            list(spec.header_columns),
            self.on_batch,
            progress=PartitionProgress(self.plan.job_label, spec.progress_interval_s)
            if spec.progress_interval_s
            else None,
        )
        chosen = writer if only is None else _only(writer, only)
        return data.mapInArrow(chosen, RESULT_SCHEMA).collect()


@dataclass(frozen=True)
class JvmWriter:
    """Kafka's Java producer in the executors, through py4j (a classic session)."""

    plan: PreparePlan
    name: str = JVM

    def write(self, data: DataFrame, only: Sequence[int] | None) -> list[Any]:
        return jvm_write(data, selected=only, **_java_arguments(self.plan))


@dataclass(frozen=True)
class DataSourceWriter:
    """Kafka's Java producer in the executors, through the ``kafka2pc`` DataSource (Spark
    Connect: no py4j on the client)."""

    plan: PreparePlan
    name: str = JVM

    def write(self, data: DataFrame, only: Sequence[int] | None) -> list[Any]:
        return connect_jvm_write(data, selected=only, **_java_arguments(self.plan))


def writer_for(
    plan: PreparePlan,
    data: DataFrame,
    producer_config: Mapping[str, Any],
    on_batch: ArrowBatchCallback | None = None,
) -> TransactionWriter:
    """The writer the plan chose, for the session ``data`` lives in."""
    if plan.java_settings is None:
        return PythonWriter(plan, producer_config, on_batch)
    if is_connect(data.sparkSession):
        return DataSourceWriter(plan)
    return JvmWriter(plan)


def _java_arguments(plan: PreparePlan) -> dict[str, Any]:
    """The Java writer's arguments, derived from the plan in this one place."""
    return {
        "topics": list(plan.spec.route.topics),
        "transactional_ids": list(plan.ids),
        "settings": dict(plan.java_settings or {}),
        "transaction_timeout_ms": plan.spec.transaction_timeout_ms,
        "header_names": list(plan.spec.header_columns),
    }


def _only(writer: Any, selected: Sequence[int]) -> Any:
    """The ``mapInArrow`` function restricted to ``selected`` partitions: the others read
    their (cached) input and write nothing, not even an InitProducerId for their id."""
    chosen = frozenset(selected)

    def write_selected(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        if TaskContext.get().partitionId() in chosen:
            yield from writer(batches)

    return write_selected
