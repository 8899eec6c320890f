"""Benchmark of the transaction core: the writer's throughput and the controller's commit cost.

Why: the provider is only worth using if exactly-once costs little over a plain producer,
and if finishing many prepared transactions from one process (the commit task) is quick.
On the shared harness (one broker, the shared dataset, interleaved rounds, every output
verified by audit + read_committed + digest):

(a) Writer throughput. ``TransactionalWriter.write`` of ``--records`` records (built before
    the timed section; timed from the call until the committable is back: producer set-up,
    flush, every delivery report, teardown) against a non-transactional idempotent
    confluent-kafka producer on the same list (``Producer()`` to flushed and destroyed), once
    with a delivery callback that counts reports (like for like: the writer needs them) and
    once without. Same partitioner (murmur2), librdkafka's default batching. The result is
    the median of per-round ratios; the fixed cost of a 1-record call is reported beside it.
(b) Commit cost. ``2 x --committables`` small transactions are prepared (untimed); half are
    committed one by one by ``TransactionController.commit`` through one ``KafkaProtocol``
    (a counting proxy tells the requests and time one commit costs), the other half by one
    ``commit_all``.

Run: ``python benchmarks/bench_transaction_core.py [--records 200000 --rounds 2]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

from confluent_kafka import Producer
from harness import (
    Cluster,
    Dataset,
    Expected,
    Meter,
    Record,
    Round,
    Run,
    Side,
    add_cluster_arguments,
    checked,
    fmt,
    interleave,
    machine_line,
    measure,
    median,
    print_results,
    print_table,
    print_verification,
    ratios,
    verify_topic,
)

from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from airflow_provider_kafka2pc.transaction.delivery import DeliveryReports
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter

WRITER = "TransactionalWriter.write"
IDEM_CB = "idempotent + callback"
IDEM_NOCB = "idempotent, no callback"

WRITER_RATIO_TARGET = 0.85
COMMIT_TARGET_S = 2.0  # for 100 commits; scaled to --committables
FLUSH_TIMEOUT_S = 120.0
FIXED_COST_SAMPLES = 3
WARMUP_RECORDS = 20_000


# -- (a) writer throughput -----------------------------------------------------


def produce_idempotent(
    config: dict[str, Any], topic: str, records: Sequence[Record], with_callback: bool
) -> None:
    """Produce ``records`` with a plain idempotent producer, from set-up to teardown."""
    deliveries = DeliveryReports() if with_callback else None
    settings = {
        **config,
        "enable.idempotence": True,
        "allow.auto.create.topics": False,
        "partitioner": "murmur2_random",  # the writer's default (Java-compatible)
    }
    if deliveries is not None:
        settings["on_delivery"] = deliveries  # set once, as the writer does
    producer = Producer(settings)
    # Two metadata round trips first (the writer makes one, its topic check). Without them
    # librdkafka 2.16 stalls ~500 ms for the producer id: it retires the bootstrap
    # connection before the broker's own one is up, and retries on a 500 ms timer.
    for _ in range(2):
        producer.list_topics(topic, timeout=FLUSH_TIMEOUT_S)
    produce, poll = producer.produce, producer.poll
    # The same loop shape as the writer: backpressure on BufferError, poll(0) every 1024.
    for index, (key, value) in enumerate(records, start=1):
        while True:
            try:
                produce(topic, value, key)
                break
            except BufferError:
                poll(0.05)
        if not index & 1023:
            poll(0)
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    del producer, produce, poll  # teardown is timed on both sides (the writer's is implicit)
    if remaining:
        raise RuntimeError(f"{topic}: {remaining} records undelivered")
    if deliveries is not None and (deliveries.error or deliveries.count != len(records)):
        raise RuntimeError(f"{topic}: {deliveries.count} of {len(records)} delivered")


class Throughput:
    """The three sides of (a), each writing the shared records into a fresh topic."""

    def __init__(self, cluster: Cluster, data: Dataset, partitions: int) -> None:
        self.cluster, self.partitions = cluster, partitions
        self.full, self.warm = data.rows, min(WARMUP_RECORDS, data.rows)
        self.data = {n: Dataset(n) for n in (1, self.warm, self.full)}
        self.records = {n: d.records() for n, d in self.data.items()}
        self.controller = TransactionController(cluster.protocol)

    def sides(self, rows: int | None = None) -> dict[str, Side]:
        return {
            side: (lambda rnd, side=side: self.run(side, rnd, rows))
            for side in (WRITER, IDEM_CB, IDEM_NOCB)
        }

    def run(self, side: str, rnd: Round, rows: int | None) -> Run:
        n = rows if rows is not None else (self.warm if rnd.warmup else self.full)
        records, data = self.records[n], self.data[n]
        tag = {WRITER: "writer", IDEM_CB: "idem-cb", IDEM_NOCB: "idem-nocb"}[side]
        topic = self.cluster.topic(f"{rnd.label}-{n}-{tag}", self.partitions)
        committables: tuple[Committable, ...] = ()
        if side == WRITER:
            # A fresh id per call: re-using one would fence (abort) the previous transaction.
            writer = TransactionalWriter(self.cluster.config, f"bench-{topic}")
            with measure(self.cluster.broker_pid, by_group=False) as meter:
                committable = writer.write(topic, records)
            outcome = self.controller.commit(committable).outcome  # untimed
            if outcome is not Outcome.COMMITTED:
                raise RuntimeError(f"{topic}: {outcome.value}")
            committables = (committable,)
        else:
            with measure(self.cluster.broker_pid, by_group=False) as meter:
                produce_idempotent(self.cluster.config, topic, records, side == IDEM_CB)
        expected = Expected(
            n,
            transactional=side == WRITER,
            digest=data.digest(),
            partition_counts=data.partition_counts(self.partitions),
            committables=committables,
        )
        return checked(self.cluster, side, meter, topic, expected)


# -- (b) commit cost ---------------------------------------------------------------


class CountingProtocol:
    """Wraps a :class:`KafkaProtocol`: counts the requests one commit makes, and their time.

    Fetches are split into "before EndTxn" (noting the log ends) and "after" (verification)
    of the commit in progress; :meth:`start_commit` marks the start of a commit. Calls not
    named in :data:`KINDS` (``api_version``: answered from cached ApiVersions) pass through.
    """

    KINDS: ClassVar[dict[str, str]] = {
        "find_transaction_coordinator": "FindCoordinator",
        "end_txn": "EndTxn",
        "init_producer_id": "InitProducerId",
        "partition_leaders": "Metadata",
        "fetch": "Fetch",
    }

    def __init__(self, inner: KafkaProtocol) -> None:
        self._inner = inner
        self._after_end_txn = False
        self.calls: dict[str, int] = {}
        self.seconds: dict[str, float] = {}

    def start_commit(self) -> None:
        self._after_end_txn = False

    def __getattr__(self, name: str) -> Any:
        call = getattr(self._inner, name)
        if name not in self.KINDS:
            return call

        def counted(*args: Any, **kwargs: Any) -> Any:
            kind = self.KINDS[name]
            if kind == "Fetch":
                kind = "Fetch (verify)" if self._after_end_txn else "Fetch (log ends)"
            start = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.calls[kind] = self.calls.get(kind, 0) + 1
                self.seconds[kind] = self.seconds.get(kind, 0.0) + time.perf_counter() - start
                self._after_end_txn |= kind == "EndTxn"

        return counted


@dataclass
class CommitResult:
    per_commit: list[float]  # sequential commit() of each committable
    calls: dict[str, int]
    seconds: dict[str, float]
    partitions: int
    prepare: Meter
    batch_seconds: float  # one commit_all() of as many other committables
    batch_calls: dict[str, int]
    verified: bool
    summary: str


def bench_commits(cluster: Cluster, args: argparse.Namespace) -> CommitResult:
    count, per_txn = args.committables, args.txn_records
    data = Dataset(2 * count * per_txn)
    records = data.records()
    topic = cluster.topic("commits", args.partitions)

    def prepare(i: int) -> Committable:
        writer = TransactionalWriter(cluster.config, f"bench-{topic}-{i:03d}")
        return writer.write(topic, records[i * per_txn : (i + 1) * per_txn])

    # Preparing is not measured; threads overlap the per-writer connection set-up.
    with measure(cluster.broker_pid) as prepare_meter, ThreadPoolExecutor(8) as pool:
        prepared = list(pool.map(prepare, range(2 * count)))
    one_by_one, batch = prepared[:count], prepared[count:]
    counting = CountingProtocol(cluster.protocol)
    controller = TransactionController(counting)  # type: ignore[arg-type]
    per_commit: list[float] = []
    try:
        for committable in one_by_one:
            counting.start_commit()
            start = time.perf_counter()
            outcome = controller.commit(committable).outcome
            per_commit.append(time.perf_counter() - start)
            if outcome is not Outcome.COMMITTED:
                raise RuntimeError(f"{committable.transactional_id}: {outcome.value}")
        sequential_calls = dict(counting.calls)
        counting.start_commit()
        start = time.perf_counter()
        outcomes = {r.outcome for r in controller.commit_all(batch)}
        batch_seconds = time.perf_counter() - start
        if outcomes != {Outcome.COMMITTED}:
            raise RuntimeError(f"commit_all: {outcomes}")
    finally:
        # Only after a failure: leave nothing open on the cluster.
        with contextlib.suppress(Exception):
            TransactionController(cluster.protocol).abort_all(prepared)
    expected = Expected(
        data.rows,
        digest=data.digest(),
        partition_counts=data.partition_counts(args.partitions),
        committables=prepared,
    )
    check = verify_topic(cluster, topic, expected)
    cluster.delete_topics([topic])
    return CommitResult(
        per_commit=per_commit,
        calls=sequential_calls,
        seconds=counting.seconds,
        partitions=sum(len(c.partitions) for c in one_by_one),
        prepare=prepare_meter,
        batch_seconds=batch_seconds,
        batch_calls={k: n - sequential_calls.get(k, 0) for k, n in counting.calls.items()},
        verified=check.ok,
        summary=check.summary(),
    )


# -- report --------------------------------------------------------------------------


def print_commits(cm: CommitResult, args: argparse.Namespace) -> bool:
    count, total = len(cm.per_commit), sum(cm.per_commit)
    ms = sorted(t * 1000 for t in cm.per_commit)
    p95 = ms[min(count - 1, int(0.95 * count))]
    print(
        f"(b) commit {count} committables ({args.txn_records} records each, "
        f"{cm.partitions / count:.1f} partitions each) sequentially, one KafkaProtocol"
    )
    print(
        f"  total {total:.3f} s; per commit mean {total / count * 1000:.1f} ms, median "
        f"{statistics.median(ms):.1f} ms, p95 {p95:.1f} ms, max {ms[-1]:.1f} ms "
        f"(prepare, untimed: {cm.prepare.seconds:.1f} s)"
    )
    order = ["Metadata", "Fetch (log ends)", "FindCoordinator", "EndTxn", "Fetch (verify)"]
    kinds = [k for k in order + sorted(set(cm.calls) - set(order)) if k in cm.calls]
    rows = [
        [
            kind,
            f"{cm.calls[kind] / count:.2f}",
            f"{cm.seconds[kind] / cm.calls[kind] * 1000:.2f}",
            f"{cm.seconds[kind] / count * 1000:.2f}",
        ]
        for kind in kinds
    ]
    rows.append(["all requests", f"{sum(cm.calls.values()) / count:.2f}", "", ""])
    print_table(["request", "per commit", "ms per call", "ms per commit"], rows)
    batch_requests = sum(cm.batch_calls.values())
    print(
        f"  commit_all of {count} other committables at once: {cm.batch_seconds:.3f} s, "
        f"{batch_requests} requests ({batch_requests / count:.2f} per committable: the log is "
        "read once per partition before and after, EndTxn once per committable)"
    )
    target = COMMIT_TARGET_S * count / 100
    print(
        f"target met: {'yes' if cm.batch_seconds <= target else 'NO'} ({count} committables by "
        f"commit_all {cm.batch_seconds:.3f} s <= {target:g} s; one by one {total:.3f} s)"
    )
    print(f"  verified {'OK' if cm.verified else 'FAILED'}: {cm.summary}")
    return cm.verified


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per side/round")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--committables", type=int, default=100)
    parser.add_argument("--txn-records", type=int, default=10, help="records per committable")
    parser.add_argument("--rounds", type=int, default=3)
    add_cluster_arguments(parser)
    args = parser.parse_args(argv)

    with Cluster.from_args(args) as cluster:
        print(f"{cluster.describe()}; {machine_line()}", flush=True)
        bench = Throughput(cluster, Dataset(args.records), args.partitions)
        # The record lists are harness artefacts: keep the cyclic GC from walking them.
        gc.collect()
        gc.freeze()
        print(f"fixed cost of a 1-record call, {FIXED_COST_SAMPLES} rounds", flush=True)
        fixed = interleave(bench.sides(rows=1), FIXED_COST_SAMPLES, warmup=False)
        print(f"(a) {args.records:,} records x {args.rounds} rounds x 3 sides", flush=True)
        throughput = interleave(bench.sides(), args.rounds)
        gc.unfreeze()
        print(f"(b) {args.committables} commits", flush=True)
        commits = bench_commits(cluster, args)

    ok = print_verification(fixed)
    title = (
        f"(a) writer throughput, {args.records:,} records of {Dataset(1).record_bytes:.0f} B, "
        f"{args.partitions} partitions"
    )
    pairs = [(WRITER, IDEM_CB), (WRITER, IDEM_NOCB)]
    ok &= print_results(throughput, title, pairs, ("rate", "cpu"))
    fixed_ms = "; ".join(
        f"{side} {fmt(median([r.seconds for r in fixed.runs[side]]) * 1000, '.1f')}"
        for side in fixed.sides
    )
    print(f"  fixed cost of a 1-record call (median ms): {fixed_ms}")
    ratio = median(ratios(throughput, WRITER, IDEM_CB, "rate"))
    print(
        f"target met: {'yes' if ratio >= WRITER_RATIO_TARGET else 'NO'} "
        f"(writer / idempotent+cb rec/s {ratio:.3f} >= {WRITER_RATIO_TARGET})"
    )
    ok &= print_commits(commits, args)
    print(f"verified:   {'yes' if ok else 'NO'} (every output: audit, read_committed, digest)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
