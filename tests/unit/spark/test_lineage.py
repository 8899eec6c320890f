"""How an export names what it reads and writes for OpenLineage: one row a source."""

from __future__ import annotations

import os

import pytest

from airflow_provider_kafka2pc.spark.lineage import source_names, topic_name

HIVE = {"spark.hadoop.hive.metastore.uris": "thrift://meta-1:9083,thrift://meta-2:9083"}


@pytest.mark.parametrize(
    ("source", "conf", "names"),
    [
        pytest.param(
            {"path": "/data/orders.parquet"}, {}, [("file", "/data/orders.parquet")], id="path"
        ),
        pytest.param(
            {"path": "file:///data/orders"}, {}, [("file", "/data/orders")], id="file URI"
        ),
        pytest.param(
            {"path": "orders.json"},
            {},
            [("file", os.path.join(os.getcwd(), "orders.json"))],
            id="relative path: absolute, as the job reads it",
        ),
        pytest.param(
            {"path": "s3a://lake/raw/orders/"},
            {},
            [("s3://lake", "raw/orders/")],
            id="s3a: the bucket is the namespace, the key the name",
        ),
        pytest.param(
            {"path": "hdfs://nn:8020/raw/orders"},
            {},
            [("hdfs://nn:8020", "/raw/orders")],
            id="hdfs",
        ),
        pytest.param(
            {"table": "sales.orders"}, {}, [("spark_catalog", "sales.orders")], id="table"
        ),
        pytest.param(
            {"table": "orders"},
            HIVE,
            [("hive://meta-1:9083", "default.orders")],
            id="table in a Hive metastore: its first address, the default database",
        ),
        pytest.param(
            {"sql": "SELECT o.id FROM sales.orders o JOIN customers c ON o.c = c.id"},
            {},
            [("spark_catalog", "customers"), ("spark_catalog", "sales.orders")],
            id="SQL: the tables it reads",
        ),
        pytest.param(
            {"sql": "SELECT id AS order_id FROM range(0, 100)"},
            {},
            [],
            id="SQL over a table-valued function reads no dataset",
        ),
        pytest.param({}, {}, [], id="nothing"),
    ],
)
def test_source_names(source, conf, names):
    assert source_names(source, conf) == names


def test_topic_is_named_by_its_bootstrap_server():
    assert topic_name("broker-1:9092", "orders") == ("kafka://broker-1:9092", "orders")
