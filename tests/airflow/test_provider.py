"""The package is an Airflow provider: registered, and every module it lists imports."""

from __future__ import annotations

import importlib
import subprocess
import sys

from airflow_provider_kafka2pc.get_provider_info import get_provider_info

PACKAGE = "airflow-provider-kafka2pc"


def _modules(info):
    for kind in ("hooks", "operators", "sensors", "triggers"):
        for entry in info[kind]:
            yield from entry["python-modules"]


def test_provider_info_lists_importable_modules_and_no_connection_type_of_its_own():
    info = get_provider_info()
    assert info["package-name"] == PACKAGE
    for module in _modules(info):
        importlib.import_module(module)
    assert "connection-types" not in info  # Kafka settings: the official `kafka` connection


def test_airflow_providers_list_shows_the_provider(airflow_db):
    listed = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "list", "--output", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert PACKAGE in listed.stdout
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert manager.providers[PACKAGE].version == get_provider_info()["versions"][0]
    triggers = {t.trigger_class_name for t in manager.trigger if t.package_name == PACKAGE}
    assert triggers == {"airflow_provider_kafka2pc.triggers.dangling"}
