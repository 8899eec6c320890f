"""Benchmark: how the decision, the commit and the ledger scale with the participants.

Why: an export has one Kafka transaction per Spark partition, so a user who raises the
partitions (more cores, a bigger input) raises the participants the decide and commit
tasks handle. Their cost must grow with the participants, not with the rows, and stay
small beside the prepare.

The same rows (``--rows``, 8-partition topic) are exported as ``--participants`` (8, 64,
256) transactions, exactly as the operators do it, without Spark and Airflow: the ledger
leases the ids (``Ledger.begin``), one ``TransactionalWriter`` transaction per participant
writes its slice and leaves it open (on ``--threads`` threads, as Spark's cores would),
``record_prepared`` stores the committables, the decision is ``decision.assess`` (ledger
+ broker: every transaction still open) and ``Ledger.decide``, and the commit is
``Coordinator.commit`` (one ``commit_all`` and every outcome recorded, then ``finish``).
Each phase is timed, and the ledger's share of the commit is timed inside it. Every
output is verified on the shared harness (audit, read_committed, digest, per-partition
counts), the sizes interleaved over ``--rounds`` rounds after a warm-up.

Run: ``python benchmarks/bench_participants.py [--participants 8,64,256 --rows 256000]``;
``--ledger-url`` points the ledger at PostgreSQL (default: a fresh SQLite file per run).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness import (
    Cluster,
    Dataset,
    Expected,
    Round,
    Run,
    add_cluster_arguments,
    checked,
    fmt,
    interleave,
    measure,
    median,
    print_results,
    print_table,
)

from airflow_provider_kafka2pc.coordination.decision import assess
from airflow_provider_kafka2pc.coordination.finish import Coordinator
from airflow_provider_kafka2pc.ledger import Ledger, Verdict
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.controller import TransactionController
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter

TOPIC_PARTITIONS = 8
#: The commit margin the decide operator uses by default is larger; this one only has to
#: pass while the benchmark's transactions are young.
COMMIT_MARGIN_MS = 60_000
PHASES = ("write", "record prepared", "decide", "commit", "of which ledger")


class TimedLedger:
    """The ledger, with the time spent in its calls added up (the commit's ledger share)."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._ledger, name)
        if not callable(attribute):
            return attribute

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return attribute(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        return timed


@contextmanager
def ledger_for(url: str | None, label: str) -> Iterator[Ledger]:
    """``url``'s ledger, or a fresh SQLite file (the embedded default)."""
    if url:
        with Ledger(url) as ledger:
            yield ledger
        return
    with (
        tempfile.TemporaryDirectory(prefix=f"bench-participants-{label}-") as directory,
        Ledger(f"sqlite:///{Path(directory) / 'ledger.db'}") as ledger,
    ):
        yield ledger


class Participants:
    def __init__(self, args: argparse.Namespace, cluster: Cluster) -> None:
        self.args, self.cluster = args, cluster
        self.data = Dataset(args.rows)
        self.records = self.data.records()

    def side(self, n: int) -> Callable[[Round], Run]:
        return lambda rnd: self.run(n, rnd)

    def run(self, n: int, rnd: Round) -> Run:
        """One export of every row as ``n`` participants: lease, write, decide, commit."""
        cluster, records = self.cluster, self.records
        topic = cluster.topic(f"{rnd.label}-n{n}", TOPIC_PARTITIONS)
        export_id, run_key = f"{cluster.prefix}.n{n}", rnd.label
        bounds = [len(records) * i // n for i in range(n + 1)]
        parts: dict[str, float] = {}

        def write(i: int, tid: str) -> Committable:
            writer = TransactionalWriter(cluster.config, tid, transaction_timeout_ms=600_000)
            return writer.write(topic, records[bounds[i] : bounds[i + 1]])

        def timed(name: str, step: Callable[[], Any]) -> Any:
            started = time.perf_counter()
            result = step()
            parts[name] = time.perf_counter() - started
            return result

        with (
            ledger_for(self.args.ledger_url, f"{rnd.label}-{n}") as ledger,
            measure(cluster.broker_pid) as meter,
        ):
            batch = ledger.begin(
                export_id,
                run_key,
                topic=topic,
                id_prefix=f"{cluster.prefix}-n{n}",
                num_partitions=n,
            )
            with ThreadPoolExecutor(self.args.threads) as pool:
                committables = timed(
                    "write",
                    lambda: list(pool.map(write, range(n), batch.transactional_ids)),
                )
            timed(
                "record prepared",
                lambda: ledger.record_prepared(
                    export_id, run_key, committables, source_rows=len(records)
                ),
            )

            def decide() -> None:
                batch = ledger.get(export_id, run_key)
                assert batch is not None
                with KafkaProtocol(cluster.config) as protocol:
                    assessment = assess(
                        batch,
                        ledger.participants(export_id, run_key),
                        protocol,
                        now_ms=int(time.time() * 1000),
                        commit_margin_ms=COMMIT_MARGIN_MS,
                    )
                if assessment.verdict is not Verdict.COMMIT:
                    raise RuntimeError(f"{n} participants assessed ABORT: {assessment.reason}")
                ledger.decide(export_id, run_key, assessment.verdict, assessment.reason)

            timed("decide", decide)
            timed_ledger = TimedLedger(ledger)

            def commit() -> None:
                with KafkaProtocol(cluster.config) as protocol:
                    coordinator = Coordinator(
                        timed_ledger,  # type: ignore[arg-type]
                        TransactionController(protocol),
                    )
                    finished = coordinator.commit(export_id, run_key)
                if finished.records != len(records):
                    raise RuntimeError(f"committed {finished.records} of {len(records)}")

            timed("commit", commit)
            parts["of which ledger"] = timed_ledger.seconds
        expected = Expected(
            len(records),
            digest=self.data.digest(),
            partition_counts=self.data.partition_counts(TOPIC_PARTITIONS),
            committables=committables,
        )
        return checked(cluster, f"{n} participants", meter, topic, expected, parts=parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--participants",
        default="8,64,256",
        help="comma-separated numbers of participants (transactions) to compare",
    )
    parser.add_argument("--rows", type=int, default=256_000, help="rows of every export")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="writers at once (Spark's cores)")
    parser.add_argument("--ledger-url", help="SQLAlchemy URL of the ledger (default: SQLite)")
    add_cluster_arguments(parser)
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.participants.split(",")]

    with Cluster.from_args(args) as cluster:
        print(
            f"{args.rows:,} rows as {sizes} participants on a {TOPIC_PARTITIONS}-partition "
            f"topic, {args.threads} writers at once, ledger "
            f"{'SQLite' if not args.ledger_url else args.ledger_url.split(':')[0]}; "
            f"{cluster.describe()}",
            flush=True,
        )
        bench = Participants(args, cluster)
        results = interleave({f"{n} participants": bench.side(n) for n in sizes}, args.rounds)

    ok = print_results(results, f"{args.rows:,} rows")
    rows = []
    for n in sizes:
        runs = results.runs[f"{n} participants"]
        phase = {name: median([r.parts[name] for r in runs]) for name in PHASES}
        rows.append(
            [
                str(n),
                *[fmt(phase[name], ".3f") for name in PHASES],
                fmt(1000 * (phase["decide"] + phase["commit"]) / n, ".1f"),
            ]
        )
    print_table(["participants", *[f"{p} s" for p in PHASES], "decide+commit ms each"], rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
