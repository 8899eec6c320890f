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
(``ListTransactions`` filtered by prefix), then verifies both topics on the shared harness
(audit, read_committed, digest: both modes write the same records) and asserts: every
run's rows committed exactly once, nothing open, and pooled distinct ids <= P x 2 (two
concurrent runs).

Run: ``python benchmarks/bench_id_pool.py [--runs 50 --partitions 4]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from harness import (
    Cluster,
    Dataset,
    Expected,
    Round,
    Run,
    add_cluster_arguments,
    checked,
    interleave,
    measure,
    print_results,
    print_table,
)

from airflow_provider_kafka2pc.ledger import Ledger, ParticipantState, Verdict
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.controller import TransactionController
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter

#: Concurrent runs in the second part (the bound the pool must keep: P x this).
CONCURRENT = 2


@dataclass
class Mode:
    """One naming scheme: how a run's id prefix is chosen, and what it cost."""

    name: str
    export_id: str
    #: Run number -> the id prefix its batch leases from.
    prefix_of: Callable[[int], str]
    #: What ListTransactions is filtered by to find this mode's ids.
    broker_prefix: str
    topic: str = ""
    committables: list[Committable] = field(default_factory=list)
    #: Most ids leased at one moment (sampled while two runs hold their leases).
    peak_leased: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class IdPool:
    """Both modes export the same records (run ``n``, participant ``i`` writes its slice)."""

    def __init__(self, args: argparse.Namespace, cluster: Cluster, ledger: Ledger) -> None:
        self.args, self.cluster, self.ledger = args, cluster, ledger
        self.data = Dataset(args.runs * args.partitions * args.rows)
        self.records = self.data.records()

    def one_run(self, mode: Mode, n: int, meet: threading.Barrier | None) -> None:
        """One export run: lease, prepare P transactions, decide COMMIT, commit, finish."""
        p, rows, ledger = self.args.partitions, self.args.rows, self.ledger
        run_key = f"run-{n:03d}"
        batch = ledger.begin(
            mode.export_id, run_key, topic=mode.topic, id_prefix=mode.prefix_of(n), num_partitions=p
        )
        if meet is not None:
            meet.wait(timeout=60)  # both runs hold their leases now
            leased = sum(
                1 for lease in ledger.leases() if lease.leased and lease.export_id == mode.export_id
            )
            with mode.lock:
                mode.peak_leased = max(mode.peak_leased, leased)
        committables = []
        for i, tid in enumerate(batch.transactional_ids):
            first = (n * p + i) * rows
            writer = TransactionalWriter(self.cluster.config, tid, transaction_timeout_ms=60_000)
            committables.append(writer.write(mode.topic, self.records[first : first + rows]))
        ledger.record_prepared(
            mode.export_id,
            run_key,
            committables,
            source_rows=sum(c.record_count for c in committables),
        )
        ledger.decide(mode.export_id, run_key, Verdict.COMMIT, "benchmark")
        with KafkaProtocol(self.cluster.config) as protocol:
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

    def run_mode(self, mode: Mode, rnd: Round) -> Run:
        """Every run of ``mode``: the first ``--sequential`` one at a time, then in pairs."""
        runs, sequential = self.args.runs, self.args.sequential
        mode.topic = self.cluster.topic(mode.name, self.args.partitions)
        with measure(self.cluster.broker_pid) as meter:
            for n in range(min(sequential, runs)):
                self.one_run(mode, n, None)
            with ThreadPoolExecutor(CONCURRENT) as pool:
                for first in range(sequential, runs, CONCURRENT):
                    group = list(range(first, min(first + CONCURRENT, runs)))
                    meet = threading.Barrier(len(group))
                    for future in [pool.submit(self.one_run, mode, n, meet) for n in group]:
                        future.result()
        info = {
            "distinct ids used (ledger)": len(
                {
                    lease.transactional_id
                    for lease in self.ledger.leases()
                    if lease.transactional_id.startswith(mode.broker_prefix)
                }
            ),
            "ids the broker remembers": len(
                self.cluster.protocol.list_transactions(prefix=mode.broker_prefix)
            ),
            "most ids leased at once": mode.peak_leased,
        }
        expected = Expected(
            self.data.rows,
            digest=self.data.digest(),
            partition_counts=self.data.partition_counts(self.args.partitions),
            committables=mode.committables,
        )
        return checked(self.cluster, mode.name, meter, mode.topic, expected, info=info)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=4, help="P: participants per run")
    parser.add_argument("--rows", type=int, default=5, help="records per participant")
    parser.add_argument(
        "--sequential", type=int, default=20, help="runs one at a time before the pairs"
    )
    add_cluster_arguments(parser)
    args = parser.parse_args(argv)
    p = args.partitions

    with (
        Cluster.from_args(args) as cluster,
        tempfile.TemporaryDirectory(prefix="bench-pool-") as directory,
        Ledger(f"sqlite:///{Path(directory) / 'ledger.db'}") as ledger,
    ):
        base = cluster.prefix
        modes = {
            "pooled": Mode("pooled", f"{base}.pooled", lambda n: f"{base}-pool", f"{base}-pool-"),
            "fresh": Mode(
                "fresh", f"{base}.fresh", lambda n: f"{base}-fresh.r{n:03d}", f"{base}-fresh."
            ),
        }
        print(
            f"{args.runs} runs x {p} partitions x {args.rows} records per mode; runs "
            f"{args.sequential + 1}..{args.runs} {CONCURRENT} at a time; {cluster.describe()}",
            flush=True,
        )
        bench = IdPool(args, cluster, ledger)
        sides = {name: (lambda rnd, m=mode: bench.run_mode(m, rnd)) for name, mode in modes.items()}
        results = interleave(sides, 1, warmup=False)

    ok = print_results(results, f"{args.runs} runs x {p} participants x {args.rows} records")
    pooled, fresh = (results.runs[name][0] for name in modes)
    print_table(
        ["", "pooled", "fresh"],
        [[name, str(value), str(fresh.info[name])] for name, value in pooled.info.items()],
    )
    print(
        f"bound for pooled: P x concurrent runs = {p} x {CONCURRENT} = {p * CONCURRENT}; "
        f"fresh: runs x P = {args.runs * p}"
    )
    problems = [] if ok else ["an export's output failed its verification (above)"]
    if pooled.info["distinct ids used (ledger)"] > p * CONCURRENT:
        problems.append(f"pooled used more than {p} x {CONCURRENT} ids")
    if pooled.info["ids the broker remembers"] > p * CONCURRENT:
        problems.append(f"the broker remembers more than {p * CONCURRENT} pooled ids")
    if args.runs > args.sequential and pooled.info["most ids leased at once"] != p * CONCURRENT:
        problems.append("two runs never held leases together")
    if fresh.info["distinct ids used (ledger)"] != args.runs * p:
        problems.append(f"fresh did not use {args.runs * p} ids")
    for problem in problems:
        print(f"FAILED: {problem}")
    if not problems:
        print(
            f"PASSED: pooled ids {pooled.info['distinct ids used (ledger)']} <= {p * CONCURRENT}"
            f" (fresh {fresh.info['distinct ids used (ledger)']}); every run committed once"
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
