"""What an export reads and writes, named as OpenLineage's naming conventions name datasets.

Plain (namespace, name) pairs, free of Airflow and of the OpenLineage client: the operators
turn them into datasets (:mod:`airflow_provider_kafka2pc.utils.openlineage`).

* a topic: ``kafka://<bootstrap host:port>`` / ``<topic>`` (as the official Kafka
  provider's asset converter names it);
* a path: ``file`` / ``<absolute path>`` on the local file system; ``s3://<bucket>`` /
  ``<key>`` and the other object stores; ``<scheme>://<authority>`` / ``<path>`` otherwise
  (HDFS);
* a table: ``hive://<metastore host:port>`` / ``<database>.<table>`` when the job's Spark
  settings name a Hive metastore; otherwise ``spark_catalog`` (Spark's session catalog,
  which has no address) / the table as written;
* a SQL query: the tables it reads (OpenLineage's SQL parser, Spark dialect), each named as
  a table.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

#: Spark's session catalog: what a table is read from when no metastore is named.
SESSION_CATALOG = "spark_catalog"
#: Spark settings that name a Hive metastore (thrift://host:port[,...]).
METASTORE_SETTINGS = ("spark.hadoop.hive.metastore.uris", "spark.hive.metastore.uris")
#: Object stores: the bucket is the namespace, the key (no leading slash) the name.
_OBJECT_STORES = {
    "s3": "s3",
    "s3a": "s3",
    "s3n": "s3",
    "gs": "gs",
    "abfss": "abfss",
    "wasbs": "wasbs",
}
#: Spark's table-valued functions, which the SQL parser reports as tables: they read nothing.
_TABLE_FUNCTIONS = frozenset({"range", "explode", "explode_outer", "inline", "inline_outer"})
_TABLE_FUNCTIONS |= {"json_tuple", "posexplode", "posexplode_outer", "stack", "sql_keywords"}

Name = tuple[str, str]


def topic_name(bootstrap_server: str, topic: str) -> Name:
    return f"kafka://{bootstrap_server}", topic


def path_name(path: str) -> Name:
    parts = urlsplit(path)
    if parts.scheme in ("", "file") or len(parts.scheme) == 1:  # "C:\..." is a local path
        local = parts.path if parts.scheme == "file" else path
        return "file", os.path.abspath(os.path.expanduser(local))
    scheme = parts.scheme.lower()
    if scheme in _OBJECT_STORES:
        return f"{_OBJECT_STORES[scheme]}://{parts.netloc}", parts.path.lstrip("/")
    return f"{scheme}://{parts.netloc}", parts.path or "/"


def table_name(table: str, spark_conf: Mapping[str, str]) -> Name:
    metastore = next((spark_conf[k] for k in METASTORE_SETTINGS if spark_conf.get(k)), None)
    if metastore:
        first = urlsplit(metastore.split(",")[0].strip())
        qualified = table if "." in table else f"default.{table}"
        return f"hive://{first.netloc}", qualified
    return SESSION_CATALOG, table


def sql_tables(sql: str) -> list[str]:
    """The tables a Spark SQL query reads; [] when the parser is missing or fails."""
    try:
        from openlineage.common.sql import parse
    except ImportError:  # the openlineage extra is not installed
        return []
    meta = parse(sql, dialect="sparksql")
    if meta is None:
        return []
    names = [t.qualified_name for t in meta.in_tables if t.name.lower() not in _TABLE_FUNCTIONS]
    return sorted(dict.fromkeys(names))


def source_names(source: Mapping[str, object], spark_conf: Mapping[str, str]) -> list[Name]:
    """The datasets an export's ``source`` (``sql``, ``table`` or ``path``) reads."""
    if source.get("path"):
        return [path_name(str(source["path"]))]
    if source.get("table"):
        return [table_name(str(source["table"]), spark_conf)]
    if source.get("sql"):
        return [table_name(t, spark_conf) for t in sql_tables(str(source["sql"]))]
    return []
