"""The project's jar goes to spark-submit with the session (docs/performance-startup.md)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from airflow_provider_kafka2pc.spark import PROJECT_JAR
from airflow_provider_kafka2pc.spark.job import with_project_jar
from tests.support.jvm_test_jar import not_product_classes


def test_the_jar_is_added_when_no_jars_are_given():
    assert with_project_jar({"spark.ui.enabled": "false"}, "python") == {
        "spark.ui.enabled": "false",
        "spark.jars": PROJECT_JAR,
    }


def test_the_users_jars_are_kept_first():
    conf = with_project_jar({"spark.jars": "/opt/a.jar,/opt/b.jar"}, "python")
    assert conf["spark.jars"] == f"/opt/a.jar,/opt/b.jar,{PROJECT_JAR}"


def test_the_jar_is_not_added_twice():
    once = with_project_jar({}, "python")
    assert with_project_jar(once, "python") == once


@pytest.mark.parametrize("writer", ["auto", "jvm"])
def test_the_jvm_writer_and_auto_use_the_users_kafka_client(writer):
    """Under auto (the default) as under jvm, a Kafka client the user brings is the one
    the session loads: nothing is fetched, only the project's jar is added."""
    conf = {"spark.jars.packages": "org.apache.kafka:kafka-clients:4.4.0"}
    assert with_project_jar(conf, writer)["spark.jars"] == PROJECT_JAR


def test_the_jar_is_in_the_package():
    assert Path(PROJECT_JAR).is_file()


def test_the_jar_holds_the_products_classes_only():
    """No test gear ships: the fault hook and the harness are in the tests' jar
    (jvm/test-src), and every class here comes from a jvm/src source."""
    with zipfile.ZipFile(PROJECT_JAR) as jar:
        names = jar.namelist()
    assert "kafka2pc/spark/WriterHook.class" in names
    assert not_product_classes(names) == []
    assert [n for n in names if "Fault" in n or "Harness" in n] == []
