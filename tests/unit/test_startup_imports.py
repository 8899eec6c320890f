"""What each short-lived process imports at start-up (docs/performance-startup.md).

``kafka2pc commit`` runs once per export, and its process start was mostly imports; the
spark-submit application imports before its SparkSession can start. Each is checked in a
fresh interpreter, so what this test process already imported does not hide a regression.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Modules no path below may load: Airflow, and the ledger's database stack.
NEVER = ("airflow", "sqlalchemy", "alembic")


def loaded_after(code: str, watched: tuple[str, ...]) -> set[str]:
    """The ``watched`` top-level modules present in ``sys.modules`` after running ``code``."""
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps(sorted(m for m in {list(watched)!r} if m in sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


HEAVY = (
    *NEVER,
    "confluent_kafka",
    "asyncio",
    "urllib.request",
    "subprocess",
    # Developer tools (the broker launcher, the demo) are not installed with the package.
    "devtools",
    "airflow_provider_kafka2pc.transaction.writer",
    "airflow_provider_kafka2pc.transaction.audit",
)

COMMIT = (
    "from airflow_provider_kafka2pc import cli\n"
    "import contextlib, io\n"
    "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
    "    cli._parser().parse_args(['commit', '-b', 'localhost:1', 'manifest.json'])"
)


def test_the_commit_path_loads_no_confluent_kafka_nor_devtools():
    assert loaded_after(COMMIT, HEAVY) == set()


def test_the_commit_path_still_loads_what_it_uses():
    """The test above is not passing because nothing was imported at all."""
    used = ("kafka", "airflow_provider_kafka2pc.transaction.controller")
    assert loaded_after(COMMIT, used) == set(used)


@pytest.mark.parametrize("name", ["DEFAULT_KAFKA_VERSION", "KafkaBroker", "fetch_kafka"])
def test_the_broker_package_still_exports_its_names(name):
    from devtools import broker

    assert getattr(broker, name) is not None
    assert name in broker.__all__


def test_the_broker_package_refuses_an_unknown_name():
    from devtools import broker

    with pytest.raises(AttributeError):
        broker.KafkaBrokre  # noqa: B018


def test_the_spark_application_imports_no_airflow_before_its_session():
    pytest.importorskip("pyspark")
    assert loaded_after("import airflow_provider_kafka2pc.spark.app", NEVER) == set()
