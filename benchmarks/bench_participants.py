"""Benchmark: how the decision, the commit and the ledger scale with the participants.

Why: an export has one Kafka transaction per Spark partition, so a user who raises the
partitions (more cores, a bigger input) raises the participants the decide and commit
tasks handle. Their cost must grow with the participants, not with the rows, and stay
small beside the prepare; and no coordination step may grow faster than linearly, or a
thousand partitions would stall the commit, the recovery round or the exports page.

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

With ``--recovery`` (the thousand-participant run: ``--participants 1000,5000
--rows-per-participant 4 --rounds 1 --recovery``) each size also times the other
coordination steps on a second batch of the same export, written after the first is
committed (its lease takes the ids the first gave back to the pool: "lease again") and
decided COMMIT but left unfinished, as a commit task that died leaves it: the exports
page's data (``plugins.overview.read_export`` and the dry recovery round the page runs),
the recovery round that commits it (``coordination.recovery.recover``: ListTransactions,
DescribeTransactions, the commit, the check afterwards), and the log audit
(``audit_topic`` over the first batch's committables). Both topics are verified. The
table then gives each step's seconds per participant and, for the two largest sizes, the
ratio of their times against the ratio of their sizes (linear: equal; quadratic: squared).

Run: ``python benchmarks/bench_participants.py [--participants 8,64,256 --rows 256000]``;
``--ledger-url`` points the ledger at PostgreSQL (default: a fresh SQLite file per run).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
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
    verify_topic,
)

from airflow_provider_kafka2pc.coordination.decision import assess
from airflow_provider_kafka2pc.coordination.finish import Coordinator
from airflow_provider_kafka2pc.coordination.recovery import recover
from airflow_provider_kafka2pc.ledger import BatchState, Ledger, Verdict
from airflow_provider_kafka2pc.plugins.overview import read_export
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.transaction.audit import audit_topic
from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.controller import TransactionController
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter

TOPIC_PARTITIONS = 8
#: The commit margin the decide operator uses by default is larger; this one only has to
#: pass while the benchmark's transactions are young.
COMMIT_MARGIN_MS = 60_000
PHASES = ("write", "record prepared", "decide", "commit", "of which ledger")
#: The coordination steps of the scaling table (``--recovery`` adds the last four).
STEPS = ("lease", "record prepared", "decide", "commit", "of which ledger")
RECOVERY_STEPS = ("lease again", "exports page", "recover", "audit")


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
        self._data: dict[int, Dataset] = {}

    def data(self, n: int) -> Dataset:
        """The rows of an export of ``n`` participants: ``--rows``, or
        ``--rows-per-participant`` times ``n``."""
        rows = (
            self.args.rows
            if not self.args.rows_per_participant
            else n * self.args.rows_per_participant
        )
        return self._data.setdefault(rows, Dataset(rows))

    def side(self, n: int) -> Callable[[Round], Run]:
        return lambda rnd: self.run(n, rnd)

    def prepare(
        self,
        ledger: Ledger,
        n: int,
        topic: str,
        run_key: str,
        records: Sequence[tuple[bytes, bytes]],
        timed: Callable[[str, Callable[[], Any]], Any],
        lease: str = "lease",
    ) -> list[Committable]:
        """Lease, write and record ``n`` participants, then decide COMMIT."""
        cluster, export_id = self.cluster, self.export_id(n)
        bounds = [len(records) * i // n for i in range(n + 1)]
        batch = timed(
            lease,
            lambda: ledger.begin(
                export_id, run_key, topic=topic, id_prefix=self.id_prefix(n), num_partitions=n
            ),
        )

        def write(i: int, tid: str) -> Committable:
            writer = TransactionalWriter(cluster.config, tid, transaction_timeout_ms=600_000)
            return writer.write(topic, records[bounds[i] : bounds[i + 1]])

        with ThreadPoolExecutor(self.args.threads) as pool:
            committables = timed(
                "write", lambda: list(pool.map(write, range(n), batch.transactional_ids))
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
        return committables

    def export_id(self, n: int) -> str:
        return f"{self.cluster.prefix}.n{n}"

    def id_prefix(self, n: int) -> str:
        return f"{self.cluster.prefix}-n{n}"

    def run(self, n: int, rnd: Round) -> Run:
        """One export of every row as ``n`` participants: lease, write, decide, commit
        (and with ``--recovery``, a second batch left for the page and the recovery round)."""
        cluster = self.cluster
        data = self.data(n)
        records = data.records()
        topic = cluster.topic(f"{rnd.label}-n{n}", TOPIC_PARTITIONS)
        export_id, run_key = self.export_id(n), rnd.label
        parts: dict[str, float] = {}
        info: dict[str, Any] = {"load": os.getloadavg()[0]}

        def timed(name: str, step: Callable[[], Any]) -> Any:
            started = time.perf_counter()
            result = step()
            parts[name] = time.perf_counter() - started
            return result

        second: tuple[str, list[Committable]] | None = None
        started = time.perf_counter()
        with (
            ledger_for(self.args.ledger_url, f"{rnd.label}-{n}") as ledger,
            measure(cluster.broker_pid) as meter,
        ):
            committables = self.prepare(ledger, n, topic, run_key, records, timed)
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
            if self.args.recovery:
                second = self.recovery_steps(ledger, n, rnd, records, timed)
                timed(
                    "audit",
                    lambda: audit_topic(cluster.protocol, topic, committables),
                )
        info["wall s"] = time.perf_counter() - started
        expected = Expected(
            len(records),
            digest=data.digest(),
            partition_counts=data.partition_counts(TOPIC_PARTITIONS),
            committables=committables,
        )
        run = checked(cluster, f"{n} participants", meter, topic, expected, parts=parts, info=info)
        if second is not None and run.verification is not None:
            topic_b, committables_b = second
            check = verify_topic(
                cluster, topic_b, Expected(**{**expected.__dict__, "committables": committables_b})
            )
            cluster.delete_topics([topic_b])
            run.verification.problems += [f"second batch: {p}" for p in check.problems]
        return run

    def recovery_steps(
        self,
        ledger: Ledger,
        n: int,
        rnd: Round,
        records: Sequence[tuple[bytes, bytes]],
        timed: Callable[[str, Callable[[], Any]], Any],
    ) -> tuple[str, list[Committable]]:
        """A second batch, decided COMMIT and left unfinished: the exports page reads it,
        a recovery round commits it. Returns its topic and committables."""
        cluster, export_id, run_key = self.cluster, self.export_id(n), f"{rnd.label}-b"
        topic = cluster.topic(f"{rnd.label}-n{n}-b", TOPIC_PARTITIONS)
        skip = {"write", "record prepared", "decide"}

        def untimed_or(name: str, step: Callable[[], Any]) -> Any:
            return step() if name in skip else timed(name, step)

        committables = self.prepare(
            ledger, n, topic, run_key, records, untimed_or, lease="lease again"
        )
        with KafkaProtocol(cluster.config) as protocol:
            controller = TransactionController(protocol)

            def page() -> None:
                now = datetime.now(UTC)
                view = read_export(ledger, export_id, None, recent=10, now=now)
                report = recover(
                    ledger,
                    protocol,
                    controller,
                    export_id,
                    [self.id_prefix(n)],
                    grace_period=timedelta(0),
                    now=now,
                    dry_run=True,
                )
                shown = sum(len(row.participants) for row in view.batches)
                if shown != 2 * n or len(report.found) != n:
                    raise RuntimeError(
                        f"the page shows {shown} participants and {len(report.found)} open "
                        f"transactions, not {2 * n} and {n}"
                    )

            timed("exports page", page)

            def round_() -> None:
                report = recover(
                    ledger,
                    protocol,
                    controller,
                    export_id,
                    [self.id_prefix(n)],
                    grace_period=timedelta(0),
                )
                batch = ledger.get(export_id, run_key)
                if (
                    report.failed
                    or len(report.committed) != n
                    or batch is None
                    or batch.state is not BatchState.COMMITTED
                ):
                    raise RuntimeError(f"recovery of {n} participants: {report.summary()}")

            timed("recover", round_)
        return topic, committables


def slope_rows(
    results: Any, sizes: Sequence[int], steps: Sequence[str]
) -> tuple[list[str], list[list[str]]]:
    """Step x participants: median seconds, ms per participant at the largest size, and
    the ratio of the two largest sizes' times (beside the ratio of the sizes)."""
    medians = {
        n: {
            s: median([r.parts.get(s, float("nan")) for r in results.runs[f"{n} participants"]])
            for s in steps
        }
        for n in sizes
    }
    big = sorted(sizes)[-2:]
    headers = ["step", *[f"{n} s" for n in sizes], f"ms each ({sizes[-1]})"]
    if len(big) == 2:
        headers.append(f"t({big[1]})/t({big[0]})")
    rows = []
    for step in steps:
        row = [step, *[fmt(medians[n][step], ".3f") for n in sizes]]
        row.append(fmt(1000 * medians[sizes[-1]][step] / sizes[-1], ".2f"))
        if len(big) == 2:
            low = medians[big[0]][step]
            row.append(fmt(medians[big[1]][step] / low if low > 0 else float("nan"), ".1f"))
        rows.append(row)
    return headers, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--participants",
        default="8,64,256",
        help="comma-separated numbers of participants (transactions) to compare",
    )
    parser.add_argument("--rows", type=int, default=256_000, help="rows of every export")
    parser.add_argument(
        "--rows-per-participant",
        type=int,
        help="rows per participant instead of --rows (small rows at many participants)",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--warmup-participants",
        type=int,
        help="warm up on one export of this many participants instead of every size "
        "(a warm-up round at 5,000 would double the run)",
    )
    parser.add_argument("--threads", type=int, default=2, help="writers at once (Spark's cores)")
    parser.add_argument(
        "--recovery",
        action="store_true",
        help="also time the lease again, the exports page, the recovery round and the audit",
    )
    parser.add_argument("--ledger-url", help="SQLAlchemy URL of the ledger (default: SQLite)")
    add_cluster_arguments(parser)
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.participants.split(",")]
    began = time.monotonic()
    rows = (
        f"{args.rows_per_participant} rows per participant"
        if args.rows_per_participant
        else f"{args.rows:,} rows"
    )

    with Cluster.from_args(args) as cluster:
        print(
            f"{rows} as {sizes} participants on a {TOPIC_PARTITIONS}-partition "
            f"topic, {args.threads} writers at once, ledger "
            f"{'SQLite' if not args.ledger_url else args.ledger_url.split(':')[0]}; "
            f"{cluster.describe()}",
            flush=True,
        )
        bench = Participants(args, cluster)
        if args.warmup_participants:
            warm = bench.run(args.warmup_participants, Round(0, "warmup"))
            check = warm.verification
            print(f"  warmup  {warm.side:<34} {check.summary() if check else ''}", flush=True)
        results = interleave(
            {f"{n} participants": bench.side(n) for n in sizes},
            args.rounds,
            warmup=not args.warmup_participants,
        )

    ok = print_results(results, rows)
    table = []
    for n in sizes:
        runs = results.runs[f"{n} participants"]
        phase = {name: median([r.parts[name] for r in runs]) for name in PHASES}
        table.append(
            [
                str(n),
                *[fmt(phase[name], ".3f") for name in PHASES],
                fmt(1000 * (phase["decide"] + phase["commit"]) / n, ".1f"),
            ]
        )
    print_table(["participants", *[f"{p} s" for p in PHASES], "decide+commit ms each"], table)
    steps = [*STEPS, *(RECOVERY_STEPS if args.recovery else ())]
    print("\ncoordination steps against the participants (median seconds):")
    print_table(*slope_rows(results, sizes, steps))
    loads = "; ".join(
        f"{n}: " + ", ".join(f"{r.info['load']:.1f}" for r in results.runs[f"{n} participants"])
        for n in sizes
    )
    print(f"load average (1 min) at the start of each run: {loads}")
    print(f"whole benchmark: {time.monotonic() - began:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
