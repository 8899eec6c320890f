"""The project's jar goes to spark-submit with the session (docs/performance-startup.md)."""

from __future__ import annotations

from pathlib import Path

from airflow_provider_kafka2pc.spark import PROJECT_JAR
from airflow_provider_kafka2pc.spark.job import with_project_jar


def test_the_jar_is_added_when_no_jars_are_given():
    assert with_project_jar({"spark.ui.enabled": "false"}) == {
        "spark.ui.enabled": "false",
        "spark.jars": PROJECT_JAR,
    }


def test_the_users_jars_are_kept_first():
    conf = with_project_jar({"spark.jars": "/opt/a.jar,/opt/b.jar"})
    assert conf["spark.jars"] == f"/opt/a.jar,/opt/b.jar,{PROJECT_JAR}"


def test_the_jar_is_not_added_twice():
    once = with_project_jar({})
    assert with_project_jar(once) == once


def test_the_jar_is_in_the_package():
    assert Path(PROJECT_JAR).is_file()
