"""OpenLineage datasets and facets for the export's operators (the ``openlineage`` extra).

Called only from ``get_openlineage_facets_on_*``, which the OpenLineage provider calls only
when it is installed; every import of it is therefore local. The names come from
:mod:`airflow_provider_kafka2pc.spark.lineage`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..spark.lineage import source_names, topic_name


def source_datasets(
    source: Mapping[str, Any], spark_conf: Mapping[str, str], rows: int | None
) -> list[Any]:
    """The source's datasets as inputs; ``rows`` (the rows the job read) when known and
    the source is one dataset (a join's rows are not any one table's)."""
    from airflow.providers.common.compat.openlineage.facet import InputDataset
    from openlineage.client.generated.input_statistics_input_dataset import (
        InputStatisticsInputDatasetFacet,
    )

    names = source_names(source, spark_conf)
    facets: dict[str, Any] = {}
    if rows is not None and len(names) == 1:
        facets["inputStatistics"] = InputStatisticsInputDatasetFacet(rowCount=rows)
    return [InputDataset(namespace, name, inputFacets=facets) for namespace, name in names]


def topic_dataset(bootstrap_server: str, topic: str, records: int) -> Any:
    """The topic as an output, with the records committed to it."""
    from airflow.providers.common.compat.openlineage.facet import (
        OutputDataset,
        OutputStatisticsOutputDatasetFacet,
    )

    namespace, name = topic_name(bootstrap_server, topic)
    stats = OutputStatisticsOutputDatasetFacet(rowCount=records)
    return OutputDataset(namespace, name, outputFacets={"outputStatistics": stats})


def lineage(
    source: Mapping[str, Any] | None,
    inputs: Sequence[Any],
    outputs: Sequence[Any] = (),
) -> Any:
    """An ``OperatorLineage``; a SQL source also as the job's SQL facet."""
    from airflow.providers.common.compat.openlineage.facet import SQLJobFacet
    from airflow.providers.openlineage.extractors import OperatorLineage

    job_facets: dict[str, Any] = {}
    if source and source.get("sql"):
        job_facets["sql"] = SQLJobFacet(query=str(source["sql"]))
    return OperatorLineage(inputs=list(inputs), outputs=list(outputs), job_facets=job_facets)
