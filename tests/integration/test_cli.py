"""The ``kafka2pc`` command line (help everywhere, listing) and ``python -m devtools`` (the
local broker, the demo)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_kafka2pc.protocol.versions import ApiKey
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from tests.conftest import cli, unique_id

#: ``devtools`` is not installed: it is run from the checkout.
CHECKOUT = Path(__file__).resolve().parents[2]

COMMANDS = [
    [],
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


def test_the_user_command_line_has_no_developer_commands():
    """A local broker is a developer's tool (``python -m devtools broker``), not a user's."""
    done = cli("broker", "--help")
    assert done.returncode == 2
    assert "invalid choice: 'broker'" in done.stderr


def test_devtools_help():
    for command in ([], ["broker"], ["demo"]):
        done = subprocess.run(
            [sys.executable, "-m", "devtools", *command, "--help"],
            capture_output=True,
            text=True,
            cwd=CHECKOUT,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "usage: python -m devtools" in done.stdout


def test_devtools_broker_serves_until_stopped():
    process = subprocess.Popen(
        [sys.executable, "-m", "devtools", "broker"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=CHECKOUT,
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


@pytest.mark.kafka_versions()
def test_txn_list_and_describe_show_an_open_prepared_transaction(
    bootstrap, protocol, settings, topic, kafka_version
):
    prefix = unique_id("listed")
    tid, other = f"{prefix}-0", unique_id("other")
    mine = TransactionalWriter(settings, tid).write(topic, [(b"k", b"v")])
    TransactionalWriter(settings, other).write(topic, [(b"k2", b"v2")])
    try:
        listed = cli("txn", "list", "-b", bootstrap, "--prefix", prefix)
        assert listed.returncode == 0, listed.stdout + listed.stderr
        (row,) = json.loads(listed.stdout)["transactions"]
        assert (row["transactional_id"], row["state"], row["producer_id"]) == (
            tid,
            "Ongoing",
            mine.producer_id,
        )
        # The id pattern filter exists from Kafka 4.1 (ListTransactions v2, KIP-1152).
        pattern_on_broker = protocol.api_version(ApiKey.LIST_TRANSACTIONS) >= 2
        assert pattern_on_broker == (tuple(map(int, kafka_version.split(".")[:2])) >= (4, 1))
        assert row["filtered_by"] == ("broker" if pattern_on_broker else "client")

        described = cli("txn", "describe", "-b", bootstrap, "--transactional-id", tid)
        (entry,) = json.loads(described.stdout)["transactions"]
        assert entry["state"] == "Ongoing"
        assert (entry["producer_id"], entry["producer_epoch"]) == (
            mine.producer_id,
            mine.producer_epoch,
        )
        assert entry["partitions"] == sorted(f"{p.topic}-{p.partition}" for p in mine.partitions)
    finally:
        for t in (tid, other):
            assert cli("fence", "-b", bootstrap, "--transactional-id", t).returncode == 0
    after = cli("txn", "list", "-b", bootstrap, "--prefix", prefix, "--state", "Ongoing")
    assert json.loads(after.stdout)["transactions"] == []


def test_demo_proves_exactly_once_then_writes_nothing_again(tmp_path):
    """``make demo`` on a fresh machine, then again for the same interval: written 0."""

    def demo() -> dict:
        done = subprocess.run(
            [sys.executable, "-m", "devtools", "demo"],
            capture_output=True,
            cwd=CHECKOUT,
            text=True,
            timeout=600,
            env={**os.environ, "KAFKA2PC_DEMO_DIR": str(tmp_path / "demo")},
        )
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        assert "PROVED" in done.stdout
        return json.loads(done.stdout.strip().splitlines()[-1])

    first, second = demo(), demo()
    assert first["written"] == first["source_rows"] == first["committed"] > 0
    assert (second["written"], second["committed"]) == (0, first["committed"])
    for run in (first, second):
        assert (run["duplicates"], run["open"]) == (0, 0)
