"""The ``kafka2pc`` command line: help everywhere, the embedded broker, listing, the demo."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from airflow_provider_kafka2pc.transaction.protocol import ApiKey
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter

from .conftest import cli, unique_id

COMMANDS = [
    [],
    ["broker"],
    ["topic", "create"],
    ["prepare"],
    ["commit"],
    ["abort"],
    ["fence"],
    ["audit"],
    ["txn", "list"],
    ["txn", "describe"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "kafka2pc")
def test_help_everywhere(command):
    done = cli(*command, "--help")
    assert done.returncode == 0
    assert "usage: kafka2pc" in done.stdout


def test_usage_error_is_json_and_exit_2():
    done = cli("prepare", "--topic", "t")
    assert done.returncode == 2
    assert json.loads(done.stdout.splitlines()[-1])["error"] == "UsageError"


def test_broker_command_serves_until_stopped():
    process = subprocess.Popen(
        [sys.executable, "-m", "airflow_provider_kafka2pc.cli", "broker"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        started = json.loads(process.stdout.readline())
        bootstrap = started["bootstrap_servers"]
        assert bootstrap.startswith("127.0.0.1:")
        done = cli("topic", "create", "-b", bootstrap, "-t", "hello", "--partitions", "2")
        assert json.loads(done.stdout) == {"topic": "hello", "partitions": 2}
    finally:
        process.terminate()
        assert process.wait(timeout=20) == 0
    # The broker process is gone with it.
    gone = subprocess.run(["kill", "-0", str(started["pid"])], capture_output=True)
    assert gone.returncode != 0


def test_txn_list_and_describe_where_the_broker_offers_them(bootstrap, protocol, settings, topic):
    tid = unique_id()
    TransactionalWriter(settings, tid).write(topic, [(b"k", b"v")])
    listed = cli("txn", "list", "-b", bootstrap)
    described = cli("txn", "describe", "-b", bootstrap, "--transactional-id", tid)
    if protocol.api_version(ApiKey.LIST_TRANSACTIONS) is None:
        assert listed.returncode == 1
        assert json.loads(listed.stdout)["error"] == "UnsupportedError"
    else:
        ids = [t["transactional_id"] for t in json.loads(listed.stdout)["transactions"]]
        assert tid in ids
    if protocol.api_version(ApiKey.DESCRIBE_TRANSACTIONS) is None:
        assert json.loads(described.stdout)["error"] == "UnsupportedError"
    else:
        (entry,) = json.loads(described.stdout)["transactions"]
        assert entry["state"].endswith("ONGOING") or "Ongoing" in entry["state"]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_provider_kafka2pc.cli",
            "fence",
            "-b",
            bootstrap,
            "--transactional-id",
            tid,
        ],
        check=True,
        capture_output=True,
    )


def test_demo_proves_exactly_once():
    done = subprocess.run(
        [sys.executable, "-m", "airflow_provider_kafka2pc.demo"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PROVED" in done.stdout
