"""Benchmark: pooled transactional ids against one fresh id per run and partition.

Why: the broker keeps every transactional id it has seen for
``transactional.id.expiration.ms`` (7 days by default), so a naming scheme that mints new
ids every run (Flink's one id per checkpoint, FLINK-34554) grows the coordinators' state
with every run. The ledger leases ``<prefix>-<slot>`` from a pool and takes a slot back
only when its batch is final, so the distinct ids an export ever uses stay at
partitions x concurrent runs.

Each mode runs RUNS exports of P partitions through the coordinator ledger exactly as the
operators do, against Apache Kafka (a local broker, or ``--bootstrap-servers``):
``Ledger.begin`` (leases P ids), one real ``TransactionalWriter`` transaction per
partition, ``record_prepared``, ``decide`` COMMIT, ``commit_all`` with each outcome
recorded, ``finish`` (the ids go back to the pool). No Spark, no Airflow.

- pooled: every run leases from the export's one prefix;
- fresh: every run gets a prefix of its own, so each of its ids is new (what naming an id
  after the run does).

The first ``--sequential`` runs go one at a time, the rest two at a time (the two threads
meet after ``begin``, so both hold their leases together). It prints, side by side, the
distinct ids the ledger handed out and the ids the broker remembers
(``ListTransactions`` filtered by prefix), then audits both topics from the markers and
asserts: every run's rows committed exactly once, nothing open, and pooled distinct ids
<= P x 2 (two concurrent runs).

Run: ``python benchmarks/bench_id_pool.py [--runs 50 --partitions 4]``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_kafka2pc.broker import DEFAULT_KAFKA_VERSION, KafkaBroker
from airflow_provider_kafka2pc.ledger import Ledger, ParticipantState, Verdict
from airflow_provider_kafka2pc.transaction.audit import audit_topic
from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.controller import TransactionController
from airflow_provider_kafka2pc.transaction.protocol import KafkaProtocol
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter

#: Concurrent runs in the second part (the bound the pool must keep: P x this).
CONCURRENT = 2


@dataclass
class Mode:
    """One naming scheme: how a run's id prefix is chosen, and what it cost."""

    name: str
    export_id: str
    topic: str
    #: Run number -> the id prefix its batch leases from.
    prefix_of: Callable[[int], str]
    #: What ListTransactions is filtered by to find this mode's ids.
    broker_prefix: str
    committables: list[Committable] = field(default_factory=list)
    #: Most ids leased at one moment (sampled while two runs hold their leases).
    peak_leased: int = 0
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


def one_run(
    mode: Mode,
    n: int,
    ledger: Ledger,
    config: dict[str, Any],
    partitions: int,
    rows: int,
    meet: threading.Barrier | None,
) -> None:
    """One export run: lease, prepare P transactions, decide COMMIT, commit, finish."""
    run_key = f"run-{n:03d}"
    prefix = mode.prefix_of(n)
    batch = ledger.begin(
        mode.export_id, run_key, topic=mode.topic, id_prefix=prefix, num_partitions=partitions
    )
    if meet is not None:
        meet.wait(timeout=60)  # both runs hold their leases now
        leased = sum(
            1 for lease in ledger.leases() if lease.leased and lease.export_id == mode.export_id
        )
        with mode.lock:
            mode.peak_leased = max(mode.peak_leased, leased)
    committables = [
        TransactionalWriter(config, tid, transaction_timeout_ms=60_000).write(
            mode.topic,
            [(f"{mode.name}-{n}-{i}-{r}".encode(), b"{}") for r in range(rows)],
        )
        for i, tid in enumerate(batch.transactional_ids)
    ]
    ledger.record_prepared(
        mode.export_id, run_key, committables, source_rows=sum(c.record_count for c in committables)
    )
    ledger.decide(mode.export_id, run_key, Verdict.COMMIT, "benchmark")
    with KafkaProtocol(config) as protocol:
        resolutions = TransactionController(protocol).commit_all(committables)
    for r in resolutions:
        if not r.outcome.committed:
            raise RuntimeError(f"{r.transactional_id}: {r.outcome.value} ({r.reason})")
        ledger.record_outcome(
            mode.export_id, run_key, r.transactional_id, ParticipantState.COMMITTED, r.reason
        )
    ledger.finish(mode.export_id, run_key)
    with mode.lock:
        mode.committables += committables


def run_mode(
    mode: Mode,
    ledger: Ledger,
    config: dict[str, Any],
    *,
    runs: int,
    sequential: int,
    partitions: int,
    rows: int,
) -> None:
    started = time.monotonic()
    for n in range(min(sequential, runs)):
        one_run(mode, n, ledger, config, partitions, rows, None)
    with ThreadPoolExecutor(CONCURRENT) as pool:
        for first in range(sequential, runs, CONCURRENT):
            group = list(range(first, min(first + CONCURRENT, runs)))
            meet = threading.Barrier(len(group))
            futures = [
                pool.submit(one_run, mode, n, ledger, config, partitions, rows, meet) for n in group
            ]
            for future in futures:
                future.result()
    mode.seconds = time.monotonic() - started


def distinct_ids(ledger: Ledger, mode: Mode) -> int:
    return len(
        {
            lease.transactional_id
            for lease in ledger.leases()
            if lease.transactional_id.startswith(mode.broker_prefix)
        }
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=4, help="P: participants per run")
    parser.add_argument("--rows", type=int, default=5, help="records per participant")
    parser.add_argument(
        "--sequential", type=int, default=20, help="runs one at a time before the pairs"
    )
    parser.add_argument(
        "--bootstrap-servers", help="use this cluster instead of a local Apache Kafka broker"
    )
    parser.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    args = parser.parse_args(argv)
    base = f"bench-{uuid.uuid4().hex[:8]}"
    p = args.partitions

    with contextlib.ExitStack() as stack:
        servers = args.bootstrap_servers
        if not servers:
            servers = stack.enter_context(KafkaBroker(args.kafka_version)).bootstrap_servers
        config: dict[str, Any] = {"bootstrap.servers": servers}
        protocol = stack.enter_context(KafkaProtocol(config))
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-pool-")))
        ledger = stack.enter_context(Ledger(f"sqlite:///{directory / 'ledger.db'}"))
        modes = [
            Mode(
                "pooled",
                f"{base}.pooled",
                f"{base}-pooled",
                lambda n: f"{base}-pool",
                f"{base}-pool-",
            ),
            Mode(
                "fresh",
                f"{base}.fresh",
                f"{base}-fresh",
                lambda n: f"{base}-fresh.r{n:03d}",
                f"{base}-fresh.",
            ),
        ]
        for mode in modes:
            protocol.create_topic(mode.topic, p)
        print(
            f"{args.runs} runs x {p} partitions x {args.rows} records per mode; runs "
            f"{args.sequential + 1}..{args.runs} {CONCURRENT} at a time; broker {servers}",
            flush=True,
        )
        for mode in modes:
            run_mode(
                mode,
                ledger,
                config,
                runs=args.runs,
                sequential=args.sequential,
                partitions=p,
                rows=args.rows,
            )
            print(f"  {mode.name}: {args.runs} runs in {mode.seconds:.1f} s", flush=True)

        rows = []
        for mode in modes:
            remembered = protocol.list_transactions(prefix=mode.broker_prefix)
            report = audit_topic(protocol, mode.topic, mode.committables, duplicates=True)
            rows.append((mode, distinct_ids(ledger, mode), len(remembered), report))

        print()
        print(f"{'':34}{'pooled':>12}{'fresh':>12}")
        table = [
            ("distinct ids used (ledger)", [r[1] for r in rows]),
            ("ids the broker remembers", [r[2] for r in rows]),
            ("most ids leased at once", [r[0].peak_leased for r in rows]),
            ("committed records (audit)", [r[3].totals["committed"] for r in rows]),
            ("open records (audit)", [r[3].totals["open"] for r in rows]),
            ("duplicate keys (audit)", [r[3].duplicates["extra_copies"] for r in rows]),
            ("seconds for the runs", [round(r[0].seconds, 1) for r in rows]),
        ]
        for label, values in table:
            print(f"{label:34}" + "".join(f"{v:>12}" for v in values))
        print(
            f"bound for pooled: P x concurrent runs = {p} x {CONCURRENT} = {p * CONCURRENT}; "
            f"fresh: runs x P = {args.runs * p}"
        )

        (pooled, pooled_ids, pooled_known, _), (_, fresh_ids, fresh_known, _) = rows
        expected = args.runs * p * args.rows
        problems = []
        if pooled_ids > p * CONCURRENT:
            problems.append(f"pooled used {pooled_ids} ids > {p} x {CONCURRENT}")
        if pooled_known > p * CONCURRENT:
            problems.append(f"the broker remembers {pooled_known} pooled ids > {p * CONCURRENT}")
        if args.runs > args.sequential and pooled.peak_leased != p * CONCURRENT:
            problems.append(f"two runs never held leases together ({pooled.peak_leased})")
        if fresh_ids != args.runs * p:
            problems.append(f"fresh used {fresh_ids} ids, expected {args.runs * p}")
        for mode, _, _, report in rows:
            totals = report.totals
            if (totals["committed"], totals["open"], report.duplicates["extra_copies"]) != (
                expected,
                0,
                0,
            ):
                problems.append(f"{mode.name}: audit {totals}, duplicates {report.duplicates}")
        for problem in problems:
            print(f"FAILED: {problem}")
        if not problems:
            print(
                f"PASSED: pooled ids {pooled_ids} <= {p * CONCURRENT} (fresh {fresh_ids}); "
                f"the broker remembers {pooled_known} vs {fresh_known}; every run committed once"
            )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
