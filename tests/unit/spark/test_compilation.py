"""spark/compilation.py: which compiler thresholds a prepare's driver gets, and when none.

That a real driver runs with them is proven in tests/integration/test_spark_prepare.py;
what they save, side by side, in docs/performance.md ("The JIT compiler").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_kafka2pc.spark import compilation
from airflow_provider_kafka2pc.spark.class_sharing import DRIVER_OPTIONS
from airflow_provider_kafka2pc.spark.compilation import THRESHOLDS, with_compile_thresholds


@pytest.fixture(autouse=True)
def spark_conf_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Spark configuration directory, and the switch unset."""
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    monkeypatch.delenv(compilation.SWITCH_ENV, raising=False)
    return conf_dir


def test_the_thresholds_come_before_the_users_options_so_the_users_win() -> None:
    conf = {DRIVER_OPTIONS: "-Dx=1", "spark.driver.memory": "2g"}
    out = with_compile_thresholds(conf, "spark-submit")
    assert out[DRIVER_OPTIONS].split() == [*THRESHOLDS, "-Dx=1"]
    assert out["spark.driver.memory"] == "2g"
    assert conf == {DRIVER_OPTIONS: "-Dx=1", "spark.driver.memory": "2g"}  # not changed
    assert with_compile_thresholds({}, "spark-submit") == {DRIVER_OPTIONS: " ".join(THRESHOLDS)}


def test_the_driver_options_of_spark_defaults_are_carried(spark_conf_dir: Path) -> None:
    """A ``--conf`` replaces spark-defaults.conf's value: the thresholds must start from it."""
    (spark_conf_dir / "spark-defaults.conf").write_text(
        "spark.driver.extraJavaOptions  -Djava.security.krb5.conf=/etc/krb5.conf\n"
    )
    out = with_compile_thresholds({}, "spark-submit")
    assert out[DRIVER_OPTIONS].split() == [*THRESHOLDS, "-Djava.security.krb5.conf=/etc/krb5.conf"]
    properties = spark_conf_dir / "job.properties"
    properties.write_text("spark.driver.extraJavaOptions=-Dy=2\n")
    out = with_compile_thresholds({}, "spark-submit", properties_file=str(properties))
    assert out[DRIVER_OPTIONS].split() == [*THRESHOLDS, "-Dy=2"]


@pytest.mark.parametrize(
    "options",
    [
        "-XX:TieredStopAtLevel=1",
        "-XX:-TieredCompilation",
        "-XX:Tier4InvocationThreshold=20000",
        "-XX:CompileThreshold=1000",
        "-Xint",
    ],
)
def test_left_alone_when_the_user_chose_how_the_driver_compiles(
    options: str, spark_conf_dir: Path
) -> None:
    assert with_compile_thresholds({DRIVER_OPTIONS: options}, "spark-submit") == {
        DRIVER_OPTIONS: options
    }
    defaults = spark_conf_dir / "spark-defaults.conf"
    defaults.write_text(f"spark.driver.extraJavaOptions {options}\n")
    assert with_compile_thresholds({}, "spark-submit") == {}


def test_off_with_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(compilation.SWITCH_ENV, "false")
    assert with_compile_thresholds({DRIVER_OPTIONS: "-Dx=1"}, "spark-submit") == {
        DRIVER_OPTIONS: "-Dx=1"
    }
