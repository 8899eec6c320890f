"""Probe KIP-939 (native two-phase commit) on Apache Kafka at protocol level; print markdown.

    python scripts/kip939_probe.py [--kafka-version 4.4.0] > /tmp/kip939.md

Starts three local brokers of the version in turn, each with
``transaction.max.timeout.ms=5000`` and a 500 ms timed-out-transaction check:
2PC enabled; 2PC enabled plus ``unstable.api.versions.enable``; unstable APIs without
2PC. On each it asks what InitProducerId v6 answers (``enable2Pc``, ``keepPreparedTxn``),
and where 2PC is granted, whether such a transaction outlives the broker's maximum
timeout and whether ``kafka2pc commit`` in another process still finishes it.
Records are written at protocol level (librdkafka cannot send InitProducerId v6).
Findings: docs/kip-939.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import kafka
from confluent_kafka import Consumer, TopicPartition
from kafka.protocol.producer.transaction import InitProducerIdRequest

from airflow_provider_kafka2pc.errors import ConnectionLostError
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.protocol.codes import ErrorCode, error_name
from airflow_provider_kafka2pc.protocol.producer import InitProducerIdAnswer
from airflow_provider_kafka2pc.protocol.versions import ApiKey
from airflow_provider_kafka2pc.transaction.audit import audit_topic
from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.log import LogReader, marker_views
from devtools.broker import DEFAULT_KAFKA_VERSION, KafkaBroker
from devtools.broker_answers import (
    Lab,
    coordinator_of,
    write_protocol_transaction,
)
from devtools.visible import read_committed

MAX_TIMEOUT_MS = 5_000
SHORT_TIMEOUT_MS = 3_000
BASE = {
    "transaction.max.timeout.ms": str(MAX_TIMEOUT_MS),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}
_LOADING = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
}
RUNS = {
    "2PC enabled": {"transaction.two.phase.commit.enable": "true"},
    "2PC enabled + unstable API versions": {
        "transaction.two.phase.commit.enable": "true",
        "unstable.api.versions.enable": "true",
    },
    "2PC disabled (default) + unstable API versions": {"unstable.api.versions.enable": "true"},
}


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)

    def add(self, question: str, answer: str) -> None:
        self.lines.append(f"- {question}: **{answer}**")
        print(f"  {question}: {answer}", file=sys.stderr)


def init_answer(call: Callable[[], InitProducerIdAnswer]) -> str:
    """The answer by name; asked again while a fresh broker's coordinator is loading."""
    deadline = time.monotonic() + 30
    while True:
        try:
            a = call()
        except ConnectionLostError as exc:
            return f"connection dropped ({exc})"
        if a.error not in _LOADING or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    text = f"{error_name(a.error)}, producer id {a.producer_id}, epoch {a.producer_epoch}"
    if a.ongoing_producer_id != -1:
        text += f", ongoing {a.ongoing_producer_id}/{a.ongoing_producer_epoch}"
    return text


def tid(kind: str) -> str:
    return f"kip939-{kind}-{uuid.uuid4().hex[:8]}"


def lso_and_high_watermark(settings: dict[str, Any], topic: str, partition: int) -> str:
    """The last stable offset (read_committed) next to the high watermark."""
    out = []
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = Consumer(
            {**settings, "group.id": f"kip939-{uuid.uuid4().hex[:6]}", "isolation.level": isolation}
        )
        try:
            _, end = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=10, cached=False
            )
        finally:
            consumer.close()
        out.append(end)
    return f"last stable offset {out[0]}, high watermark {out[1]}"


def probe(version: str, config: dict[str, str], report: Report) -> None:
    broker = KafkaBroker(version, config={**BASE, **config}).start()
    try:
        settings = {"bootstrap.servers": broker.bootstrap_servers}
        with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
            _probe(broker, settings, protocol, report)
    finally:
        broker.stop()


def _probe(
    broker: KafkaBroker, settings: dict[str, Any], protocol: KafkaProtocol, report: Report
) -> None:
    offered = protocol._client._manager.broker_version_data.api_versions.get(
        int(ApiKey.INIT_PRODUCER_ID)
    )
    report.add(
        "ApiVersions: InitProducerId",
        f"v{offered[0]}-v{offered[1]}; offers_kip939() = {protocol.offers_kip939()}",
    )
    first = tid("init")
    node = coordinator_of(protocol, first)

    def v6(transactional_id: str, timeout_ms: int = SHORT_TIMEOUT_MS, **flags: bool) -> str:
        node = coordinator_of(protocol, transactional_id)
        return init_answer(
            lambda: protocol.init_producer_id(
                node, transactional_id, timeout_ms, version=6, **flags
            )
        )

    granted = v6(first, enable_2pc=True)
    report.add(f"InitProducerId v6 enable2Pc=true, timeout {SHORT_TIMEOUT_MS} ms", granted)
    if granted.startswith("connection dropped"):
        logged = [
            line.strip()
            for line in broker.log_path.read_text(errors="replace").splitlines()
            if "disabled api" in line
        ]
        report.add("broker log", logged[-1] if logged else "(nothing logged)")
        return
    if granted.startswith("NONE"):
        state = protocol.describe_transactions([first])[0]
        report.add("DescribeTransactions timeout after it", f"{state.transaction_timeout_ms} ms")
    report.add(
        "InitProducerId v6 enable2Pc=true keepPreparedTxn=true",
        v6(first, enable_2pc=True, keep_prepared_txn=True),
    )
    report.add(
        "InitProducerId v6 keepPreparedTxn=true alone", v6(tid("keep"), keep_prepared_txn=True)
    )
    report.add(
        f"InitProducerId v6 enable2Pc=true, timeout 60000 ms > max {MAX_TIMEOUT_MS}",
        v6(tid("long"), 60_000, enable_2pc=True),
    )
    long_id = tid("plain")
    report.add(
        "InitProducerId v5 (no 2PC), timeout 60000 ms > max",
        init_answer(lambda: protocol.init_producer_id(node, long_id, 60_000)),
    )
    if granted.startswith("NONE"):
        _lifetime(settings, protocol, report)


def _lifetime(settings: dict[str, Any], protocol: KafkaProtocol, report: Report) -> None:
    """2PC transactions vs transaction.max.timeout.ms, then EndTxn from another process."""
    topic = f"kip939-{uuid.uuid4().hex[:8]}"
    protocol.create_topic(topic, 1)
    lab = Lab(settings, protocol, topic)

    def rows(kind: str) -> list[tuple[bytes, bytes]]:
        return [(f"{kind}-{i}".encode(), b"x") for i in range(5)]

    written = time.monotonic()
    two_pc = {
        "classic (AddPartitionsToTxn v3 + Produce v11)": write_protocol_transaction(
            protocol,
            tid("tv1"),
            topic,
            rows("tv1"),
            kip890=False,
            timeout_ms=SHORT_TIMEOUT_MS,
            enable_2pc=True,
        ),
        "KIP-890 (Produce v12)": write_protocol_transaction(
            protocol,
            tid("tv2"),
            topic,
            rows("tv2"),
            kip890=True,
            timeout_ms=SHORT_TIMEOUT_MS,
            enable_2pc=True,
        ),
    }
    control = write_protocol_transaction(
        protocol, tid("ctl"), topic, rows("ctl"), kip890=True, timeout_ms=SHORT_TIMEOUT_MS
    )
    wait_s = 2 * MAX_TIMEOUT_MS / 1000 + 1
    time.sleep(max(0.0, wait_s - (time.monotonic() - written)))
    everything = [*two_pc.values(), control]
    states = {
        d.transactional_id: d
        for d in protocol.describe_transactions([c.transactional_id for c in everything])
    }
    markers = marker_views(LogReader(protocol), everything)
    for (kind, c), m in zip(two_pc.items(), markers[:-1], strict=True):
        s = states[c.transactional_id]
        report.add(
            f"2PC {kind} transaction, {wait_s:.0f} s after writing",
            f"{s.state}, timeout {s.transaction_timeout_ms} ms, markers {_names(m.markers)}",
        )
    s = states[control.transactional_id]
    report.add(
        f"control: no 2PC, timeout {SHORT_TIMEOUT_MS} ms, same broker",
        f"{s.state}, epoch +{s.producer_epoch - control.producer_epoch}, "
        f"markers {_names(markers[-1].markers)}",
    )
    report.add("read_committed while open", lso_and_high_watermark(settings, topic, 0))
    for kind, c in two_pc.items():
        report.add(f"`kafka2pc commit` in another process, {kind}", _commit_elsewhere(settings, c))
    totals = audit_topic(protocol, topic, everything).totals
    seen = read_committed(settings, topic, timeout_s=10)
    report.add("afterwards", f"audit {totals}; read_committed saw {seen.total} records")

    for label, flags in (
        ("InitProducerId v5 (no 2PC)", {}),
        ("InitProducerId v6 enable2Pc=true (no keepPreparedTxn)", {"enable_2pc": True}),
    ):
        c = write_protocol_transaction(
            protocol,
            tid("reinit"),
            topic,
            rows("reinit"),
            kip890=True,
            timeout_ms=SHORT_TIMEOUT_MS,
            enable_2pc=True,
        )
        node = coordinator_of(protocol, c.transactional_id)

        def reinit(c: Committable = c, node: int = node, flags: dict = flags) -> Any:
            return protocol.init_producer_id(node, c.transactional_id, SHORT_TIMEOUT_MS, **flags)

        answer = init_answer(reinit)
        lab.settle([c])
        state = protocol.describe_transactions([c.transactional_id])[0].state
        marks = _names(marker_views(LogReader(protocol), [c])[0].markers)
        again = init_answer(reinit)  # the same request again: the re-init completes
        timeout = protocol.describe_transactions([c.transactional_id])[0].transaction_timeout_ms
        answer += f"; then {state}, markers {marks}; asked again: {again}, timeout {timeout} ms"
        report.add(f"{label} on an open 2PC transaction", answer)


def _names(markers: tuple[Any, ...]) -> str:
    return "[" + ", ".join(m.name if m is not None else "none" for m in markers) + "]"


def _commit_elsewhere(settings: dict[str, Any], c: Committable) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_provider_kafka2pc.cli",
            "commit",
            "-b",
            settings["bootstrap.servers"],
            "-",
        ],
        input=c.to_json(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    try:
        result = json.loads(done.stdout)
        return f"{result['outcome']} ({result['reason']}), exit {done.returncode}"
    except (ValueError, KeyError):
        return f"exit {done.returncode}: {done.stdout.strip()} {done.stderr.strip()[-300:]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    args = parser.parse_args(argv)
    request = InitProducerIdRequest(
        transactional_id="x",
        transaction_timeout_ms=1,
        producer_id=-1,
        producer_epoch=-1,
        enable2_pc=True,
        keep_prepared_txn=True,
        version=6,
    )
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        f"Produced by `python scripts/kip939_probe.py --kafka-version {args.kafka_version}` "
        f"on {now}. Every broker: {', '.join(f'`{k}={v}`' for k, v in BASE.items())}.",
        "",
        f"kafka-python {kafka.__version__}: InitProducerIdRequest "
        f"v{InitProducerIdRequest.min_version}-v{InitProducerIdRequest.max_version}; v6 "
        f"encodes `enable2_pc`/`keep_prepared_txn` (request bytes {request.encode().hex()}).",
    ]
    for name, config in RUNS.items():
        print(f"{name}:", file=sys.stderr)
        report = Report()
        probe(args.kafka_version, config, report)
        settings = ", ".join(f"`{k}={v}`" for k, v in config.items())
        out += ["", f"### Apache Kafka {args.kafka_version}, {name} ({settings})", ""]
        out += report.lines
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
