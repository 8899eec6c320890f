"""DAG files parse in a fresh Airflow with no connection defined, and read none.

A new ``AIRFLOW_HOME`` (its own SQLite metadata DB, ``airflow db migrate``), no
``AIRFLOW_CONN_*`` variable, and a secrets backend that records every connection asked
for and answers "not defined". The dags folder holds ``dags/`` and the DAG files the tests
write (the scheduler test's downstream and canary DAGs, the exports page's DAG), plus a
canary that asks for a connection at its top level, which proves the record would show a
read. ``airflow dags reserialize`` parses the folder as the dag-processor does and records
import errors; ``airflow dags list-import-errors`` must then be empty, and the only
connection asked for must be the canary's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..support.scheduler import CANARY_DAG, DOWNSTREAM_DAG
from .test_exports_page import DAG_FILE as PAGE_DAG

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
CANARY_CONN_ID = "kafka2pc_parse_canary"

#: Answers "not defined" for every connection and variable, after writing its id down.
RECORDING_BACKEND = '''
"""A secrets backend that records what is asked of it (one JSON line each)."""
import json

from airflow.secrets import BaseSecretsBackend


class RecordingBackend(BaseSecretsBackend):
    def __init__(self, record: str) -> None:
        super().__init__()
        self.record = record

    def _note(self, kind: str, key: str) -> None:
        with open(self.record, "a") as out:
            out.write(json.dumps({"kind": kind, "id": key}) + "\\n")

    def get_conn_value(self, conn_id, team_name=None):
        self._note("connection", conn_id)
        return None

    def get_variable(self, key, team_name=None):
        self._note("variable", key)
        return None
'''

#: A DAG file that reads a connection at parse time, as no DAG file should.
CANARY_PARSE_DAG = f'''
"""Canary: asks for a connection while the file is parsed (and survives its absence)."""
from airflow.sdk import DAG, BaseHook

try:
    BaseHook.get_connection("{CANARY_CONN_ID}")
except Exception:
    pass

with DAG("parse_canary", schedule=None):
    pass
'''


def test_every_dag_parses_with_no_connection_and_reads_none(tmp_path: Path) -> None:
    home = tmp_path / "home"
    dags = home / "dags"
    dags.mkdir(parents=True)
    for dag_file in sorted((REPO / "dags").glob("*.py")):
        shutil.copy(dag_file, dags / dag_file.name)
    written = {
        "orders_downstream.py": DOWNSTREAM_DAG,
        "orm_canary.py": CANARY_DAG,
        "orders_to_kafka.py": PAGE_DAG,
        "parse_canary.py": CANARY_PARSE_DAG,
    }
    for name, text in written.items():
        (dags / name).write_text(text)
    backend = tmp_path / "backend"
    backend.mkdir()
    (backend / "recording_secrets.py").write_text(RECORDING_BACKEND)
    record = tmp_path / "asked.jsonl"

    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "KAFKA2PC_"))  # no connection, no test settings
    }
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__SECRETS__BACKEND": "recording_secrets.RecordingBackend",
            "AIRFLOW__SECRETS__BACKEND_KWARGS": json.dumps({"record": str(record)}),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(backend), env.get("PYTHONPATH")])),
            # What the tests' DAG files read from the environment (names, not connections).
            "KAFKA2PC_ORDERS_TOPIC": "orders",
            "KAFKA2PC_PAGE_TOPIC": "orders",
            "DOWNSTREAM_BOOTSTRAP_SERVER": "broker.example:9092",
        }
    )

    def airflow(*args: str) -> str:
        done = subprocess.run(
            [AIRFLOW, *args], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, (args, done.stdout[-3000:], done.stderr[-3000:])
        return done.stdout

    def as_json(out: str) -> list[dict[str, object]]:
        """The JSON document of a command's output (Airflow logs warnings to stdout too)."""
        lines = [line for line in out.splitlines() if line.startswith("[")]
        return json.loads(lines[-1]) if lines else []

    airflow("db", "migrate")
    record.unlink(missing_ok=True)  # only what parsing asks counts
    airflow("dags", "reserialize")
    listed = as_json(airflow("dags", "list", "-o", "json"))
    assert {d["dag_id"] for d in listed} >= {
        "orders_export",
        "kafka2pc_maintenance",
        "orders_downstream",
        "orm_canary",
        "orders_to_kafka",
        "parse_canary",
    }, listed
    errors = as_json(airflow("dags", "list-import-errors", "-o", "json"))
    assert errors == [], errors

    asked = [json.loads(line) for line in record.read_text().splitlines()]
    connections = {a["id"] for a in asked if a["kind"] == "connection"}
    assert connections == {CANARY_CONN_ID}, asked  # the canary's read shows; nothing else
