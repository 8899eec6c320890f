"""Print what Apache Kafka's EndTxn really answers, situation by situation, as markdown.

    python scripts/broker_answers.py --output docs/broker-answers.md
    python scripts/broker_answers.py --bootstrap-servers 4.4.0=127.0.0.1:9092

Starts Apache Kafka 4.4.0 and 3.9.2 (one local KRaft node each, checking for timed-out
transactions every 500 ms), unless given running brokers as ``VERSION=HOST:PORT``.
The scenarios live in :mod:`devtools.broker_answers`, shared with
tests/integration/test_broker_answers.py, which replays every row against the document.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import logging
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import kafka

from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.transaction.audit import audit_topic
from devtools.broker import KafkaBroker
from devtools.broker_answers import (
    CLASSIC_HEADING,
    KIP890_HEADING,
    POLICY,
    SCENARIOS,
    SHORT_TRANSACTION_TIMEOUT_MS,
    Lab,
    RowResult,
    render_version,
    run_scenario,
)
from devtools.visible import read_committed

VERSIONS = ("4.4.0", "3.9.2")
BROKER_CONFIG = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


@contextlib.contextmanager
def brokers(given: dict[str, str]) -> Iterator[dict[str, str]]:
    """version -> bootstrap servers: the given ones, or local brokers started here."""
    if given:
        yield given
        return
    started = []
    try:
        for version in VERSIONS:
            started.append(KafkaBroker(version, config=BROKER_CONFIG).start())
        yield {b.version: b.bootstrap_servers for b in started}
    finally:
        for broker in started:
            broker.stop()


def run_version(bootstrap: str) -> tuple[list[RowResult], str]:
    """Every scenario on one broker; returns the rows and the topic's audit line."""
    settings = {"bootstrap.servers": bootstrap}
    with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
        topic = f"answers-{uuid.uuid4().hex[:8]}"
        protocol.create_topic(topic, 3)
        lab = Lab(settings, protocol, topic)
        rows = []
        for sc in SCENARIOS:
            started = time.monotonic()
            rows.append(run_scenario(lab, sc))
            print(f"  {sc.situation}: {time.monotonic() - started:.1f} s", file=sys.stderr)
        everything = [c for row in rows for c in row.committables]
        totals = audit_topic(protocol, topic, everything).totals
        seen = read_committed(settings, topic, timeout_s=15)
        expected = sum(row.expected_committed for row in rows)
        line = (
            f"Afterwards: log audit {totals}, read_committed consumer saw {seen.total} records "
            f"(expected committed: {expected}, stalled partitions: {len(seen.stalled)})."
        )
        return rows, line


def document(results: dict[str, tuple[list[RowResult], str]], command: str) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# What EndTxn really answers",
        "",
        f"Produced by `{command}` on {now}: Apache Kafka "
        f"{' and '.join(results)} (one local KRaft node each, "
        "`transaction.abort.timed.out.transaction.cleanup.interval.ms=500`), "
        f"kafka-python {kafka.__version__}, confluent-kafka {confluent_kafka.__version__} "
        f"(librdkafka {confluent_kafka.libversion()[0]}). "
        "`tests/integration/test_broker_answers.py` replays every row on both versions and "
        "fails when the broker or the controller answers differently from this file.",
        "",
        "Each row writes fresh transactions of "
        "a few records over 3 partitions, brings them into the situation and waits until "
        "the coordinator has settled (DescribeTransactions no longer `Prepare*`; right "
        "after an EndTxn the coordinator answers `CONCURRENT_TRANSACTIONS` while it writes "
        "markers), then sends the request through `TransactionController` and records "
        "the raw EndTxn answers it got, at the version it chose. The timeout row uses a "
        f"transaction timeout of {SHORT_TRANSACTION_TIMEOUT_MS} ms and waits for the "
        "coordinator's own abort; fencing is a completed re-initialisation "
        "(`TransactionController.fence`); the unknown-id row sends an open transaction's "
        "producer id and epoch under an id the coordinator never saw.",
        "",
        f"- {CLASSIC_HEADING[4:]}: written by `TransactionalWriter`; the controller ends "
        "them with EndTxn <= v4. The last column (4.x only) is a bare EndTxn v5 sent to an "
        "identical transaction in the same situation: what v5 would answer, for "
        "information; the controller never sends it for these.",
        f"- {KIP890_HEADING[4:]}: InitProducerId, then Produce v12 (the broker adds the "
        "partitions itself); the controller ends them with EndTxn v5.",
        "- `coordinator before`: DescribeTransactions state, and its epoch relative to "
        "the committable's.",
        f"- `controller outcome`: the Outcome, or the error raised. Marker grace "
        f"{POLICY.marker_grace_s:g} s.",
        "",
        "Expected controller outcomes (asserted by the test):",
        "",
        *[f"- {sc.situation} ({sc.request}): `{sc.expected}`, {sc.why}." for sc in SCENARIOS],
        "",
    ]
    for version, (rows, audit_line) in results.items():
        lines += [render_version(version, rows), audit_line, ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--bootstrap-servers",
        action="append",
        default=[],
        metavar="VERSION=HOST:PORT",
        help="a running broker of that Kafka version (repeatable); default: start 4.4.0 "
        "and 3.9.2 here",
    )
    parser.add_argument("--output", type=Path, help="write the markdown here, not to stdout")
    args = parser.parse_args(argv)
    given = {}
    for entry in args.bootstrap_servers:
        version, sep, servers = entry.partition("=")
        if not sep or not servers:
            parser.error(f"--bootstrap-servers {entry!r}: expected VERSION=HOST:PORT")
        given[version] = servers
    logging.basicConfig(level=logging.WARNING)
    results = {}
    with brokers(given) as servers:
        for version, bootstrap in servers.items():
            print(f"Apache Kafka {version} at {bootstrap}", file=sys.stderr)
            results[version] = run_version(bootstrap)
    command = "python scripts/broker_answers.py"
    if args.output:
        command += f" --output {args.output}"
    text = document(results, command)
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
