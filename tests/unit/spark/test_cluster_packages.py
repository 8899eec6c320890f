"""Which packages a driver hands to its executors: only a standalone cluster-mode driver's,
whose executors Spark's own launcher leaves without them (the end-to-end proof is the
registry Avro export in tests/airflow/test_export_cluster_mode.py)."""

from __future__ import annotations

import pytest

from airflow_provider_kafka2pc.spark.cluster_packages import ivy_uris

AVRO = "org.apache.spark:spark-avro_2.13:4.2.0"
STANDALONE_CLUSTER = {
    "spark.master": "spark://10.0.0.1:7077",
    "spark.submit.deployMode": "cluster",
    "spark.jars.packages": f"{AVRO}, com.example:extra:1.0,",
}


@pytest.mark.parametrize(
    ("conf", "uris"),
    [
        (
            STANDALONE_CLUSTER,
            [f"ivy://{AVRO}?transitive=true", "ivy://com.example:extra:1.0?transitive=true"],
        ),
        (
            {**STANDALONE_CLUSTER, "spark.jars.excludes": "org.slf4j:slf4j-api, log4j:log4j"},
            [
                f"ivy://{AVRO}?transitive=true&exclude=org.slf4j:slf4j-api,log4j:log4j",
                "ivy://com.example:extra:1.0?transitive=true&exclude=org.slf4j:slf4j-api,"
                "log4j:log4j",
            ],
        ),
        ({**STANDALONE_CLUSTER, "spark.submit.deployMode": "client"}, []),
        ({**STANDALONE_CLUSTER, "spark.master": "yarn"}, []),  # spark-submit resolved them
        ({**STANDALONE_CLUSTER, "spark.master": "k8s://https://api:6443"}, []),
        ({**STANDALONE_CLUSTER, "spark.jars.packages": ""}, []),
        ({k: v for k, v in STANDALONE_CLUSTER.items() if k != "spark.jars.packages"}, []),
        ({"spark.master": "local[2]"}, []),
    ],
    ids=[
        "standalone cluster",
        "with excludes",
        "client mode",
        "yarn",
        "kubernetes",
        "no packages",
        "packages unset",
        "local",
    ],
)
def test_only_a_standalone_cluster_mode_driver_hands_its_packages_on(conf, uris):
    assert ivy_uris(conf) == uris
