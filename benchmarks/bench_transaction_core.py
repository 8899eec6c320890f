"""Benchmark of the transaction core: the writer's throughput and the controller's commit cost.

Why: the provider is only worth using if exactly-once costs little over a plain producer,
and if finishing many prepared transactions from one process (the commit task) is quick.
Two measurements, each against Apache Kafka (a local broker, or ``--bootstrap-servers``):

(a) Writer throughput. ``TransactionalWriter.write`` of N records (distinct keys, fixed-size
    values, pre-built so generation is not timed; timed from the call until the committable
    is returned, i.e. producer set-up, flush, every delivery report and producer teardown)
    against a non-transactional idempotent confluent-kafka producer on the same list, timed
    from ``Producer()`` to flushed and destroyed, once with a delivery callback that counts
    errors and offsets (like for like: the writer needs the reports) and once without any.
    Both use librdkafka's default linger and batching. The machine is noisy, so every round
    runs all sides back to back, rotating which goes first, each into a fresh topic; the
    result is the median of per-round ratios. Process CPU per record (steadier than wall
    time under load) and the fixed cost of a 1-record call are reported beside it.
    Afterwards the writer's transactions are committed and the log is audited: nothing lost.
(b) Commit cost. 200 small transactions are prepared (not timed). 100 are committed one
    after the other by ``TransactionController.commit`` through one ``KafkaProtocol`` (a
    counting proxy tells how many requests, and how much time, one commit costs); the other
    100 by one ``commit_all`` call, which reads each partition once before and once after
    and sends one EndTxn per committable. The audit must find all 200 COMMITTED.

Run: ``python benchmarks/bench_transaction_core.py [--records 200000 --rounds 2]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from confluent_kafka import Producer

from airflow_provider_kafka2pc.broker import DEFAULT_KAFKA_VERSION, KafkaBroker
from airflow_provider_kafka2pc.transaction.audit import COMMITTED, AuditReport, audit_topic
from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from airflow_provider_kafka2pc.transaction.protocol import (
    FETCH_MAX_BYTES,
    ApiKey,
    FetchAnswer,
    InitProducerIdAnswer,
    KafkaProtocol,
)
from airflow_provider_kafka2pc.transaction.writer import DeliveryReports, TransactionalWriter

Record = tuple[bytes, bytes]

WRITER = "TransactionalWriter.write"
IDEM_CB = "idempotent + callback"
IDEM_NOCB = "idempotent, no callback"
SIDES = (WRITER, IDEM_CB, IDEM_NOCB)

WRITER_RATIO_TARGET = 0.85
COMMIT_TARGET_S = 2.0  # for 100 commits; scaled to --committables
FLUSH_TIMEOUT_S = 120.0
FIXED_COST_SAMPLES = 3


# -- (a) writer throughput -----------------------------------------------------


class Sample(NamedTuple):
    """Wall-clock and process CPU seconds (Python plus librdkafka threads, not the broker)."""

    wall: float
    cpu: float


def run_idempotent(
    config: dict[str, Any], topic: str, records: Sequence[Record], with_callback: bool
) -> Sample:
    """Produce ``records`` with a plain idempotent producer; seconds from set-up to teardown."""
    deliveries = DeliveryReports() if with_callback else None
    start, cpu = time.perf_counter(), time.process_time()
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
    elapsed = Sample(time.perf_counter() - start, time.process_time() - cpu)
    if remaining:
        raise RuntimeError(f"{topic}: {remaining} records undelivered")
    if deliveries is not None:
        if deliveries.error is not None:
            raise RuntimeError(f"{topic}: delivery failed: {deliveries.error.str()}")
        if deliveries.count != len(records):
            raise RuntimeError(f"{topic}: {deliveries.count} of {len(records)} delivered")
    return elapsed


def run_writer(
    config: dict[str, Any], topic: str, records: Sequence[Record], prepared: list[Committable]
) -> Sample:
    """One transaction of ``records``; seconds from ``write()`` until the committable is back."""
    # A fresh id per call: re-using one would fence (abort) the previous open transaction.
    writer = TransactionalWriter(config, f"bench-{topic}-{len(prepared)}")
    start, cpu = time.perf_counter(), time.process_time()
    committable = writer.write(topic, records)
    elapsed = Sample(time.perf_counter() - start, time.process_time() - cpu)
    prepared.append(committable)  # committed after the run, then audited
    if committable.record_count != len(records):
        raise RuntimeError(f"{topic}: writer reported {committable.record_count} records")
    return elapsed


@dataclass
class ThroughputResult:
    samples: dict[str, list[Sample]] = field(default_factory=lambda: {s: [] for s in SIDES})
    fixed: dict[str, list[Sample]] = field(default_factory=lambda: {s: [] for s in SIDES})
    committed: int = 0
    aborted: int = 0
    open: int = 0
    commit_seconds: float = 0.0


def bench_throughput(
    config: dict[str, Any],
    protocol: KafkaProtocol,
    prefix: str,
    args: argparse.Namespace,
    topics: list[str],
) -> ThroughputResult:
    value = bytes(range(256)) * (args.value_bytes // 256 + 1)
    value = value[: args.value_bytes]
    records: list[Record] = [(b"key-%010d" % i, value) for i in range(args.records)]
    # The list is a harness artefact: keep the cyclic GC from walking it in timed sections.
    gc.collect()
    gc.freeze()

    result = ThroughputResult()
    prepared: list[Committable] = []
    writer_topics: list[str] = []

    def new_topic(name: str) -> str:
        topic = f"{prefix}-{name}"
        protocol.create_topic(topic, args.partitions)
        topics.append(topic)
        return topic

    runners: dict[str, Callable[[str, Sequence[Record]], Sample]] = {
        WRITER: lambda t, r: run_writer(config, t, r, prepared),
        IDEM_CB: lambda t, r: run_idempotent(config, t, r, with_callback=True),
        IDEM_NOCB: lambda t, r: run_idempotent(config, t, r, with_callback=False),
    }
    tags = {WRITER: "writer", IDEM_CB: "idem-cb", IDEM_NOCB: "idem-nocb"}

    def rotated(rnd: int) -> tuple[str, ...]:
        return SIDES[rnd % len(SIDES) :] + SIDES[: rnd % len(SIDES)]

    try:
        # Fixed cost of one call (1 record: set-up, init, flush, teardown); also warms up.
        small = {side: new_topic(f"fixed-{tags[side]}") for side in SIDES}
        for rnd in range(FIXED_COST_SAMPLES):
            for side in rotated(rnd):
                result.fixed[side].append(runners[side](small[side], records[:1]))
        # Warm-up (not reported): broker allocations, bigger batches.
        warm = records[: min(len(records), 20_000)]
        for side in SIDES:
            runners[side](new_topic(f"warmup-{tags[side]}"), warm)
        for rnd in range(args.rounds):
            for side in rotated(rnd):
                topic = new_topic(f"r{rnd}-{tags[side]}")
                if side == WRITER:
                    writer_topics.append(topic)
                result.samples[side].append(runners[side](topic, records))
                print(
                    f"  round {rnd + 1}/{args.rounds} {side:<26} "
                    f"{args.records / result.samples[side][-1].wall:>12,.0f} rec/s",
                    flush=True,
                )
    finally:
        # Never leave transactions open (on Apache Kafka they would hold back readers).
        start = time.perf_counter()
        controller = TransactionController(protocol)
        for committable in prepared:
            outcome = controller.commit(committable).outcome
            if outcome is not Outcome.COMMITTED:
                raise RuntimeError(f"{committable.transactional_id}: {outcome.value}")
        result.commit_seconds = time.perf_counter() - start
        gc.unfreeze()

    for topic in writer_topics:
        mine = [c for c in prepared if c.partitions and c.partitions[0].topic == topic]
        totals = audit_checked(protocol, topic, mine).totals
        result.committed += totals["committed"]
        result.aborted += totals["aborted"]
        result.open += totals["open"]
    return result


def audit_checked(
    protocol: KafkaProtocol, topic: str, committables: Sequence[Committable]
) -> AuditReport:
    """Audit ``topic``; on a mismatch print, per partition, what the committables put there."""
    report = audit_topic(protocol, topic, committables)
    totals = report.totals
    expected = sum(c.record_count for c in committables)
    if totals["committed"] != expected or totals["open"] or totals["aborted"]:
        print(f"  audit of {topic}: {totals}, expected {expected:,} committed")
        for partition, seen in sorted(report.partitions.items()):
            held = sum(
                p.record_count
                for c in committables
                for p in c.partitions
                if p.topic == topic and p.partition == partition
            )
            print(
                f"    partition {partition}: committables hold {held:,}; read committed "
                f"{seen.committed:,}, open {seen.open:,}, aborted {seen.aborted:,}"
            )
    return report


# -- (b) commit cost ---------------------------------------------------------------


class CountingProtocol:
    """Wraps a :class:`KafkaProtocol`: counts calls and their time, per request kind.

    Fetches are split into "before EndTxn" (noting the log ends) and "after" (verification) of
    the commit in progress; :meth:`start_commit` marks the start of a commit.
    """

    def __init__(self, inner: KafkaProtocol) -> None:
        self._inner = inner
        self._after_end_txn = False
        self.calls: dict[str, int] = {}
        self.seconds: dict[str, float] = {}

    def start_commit(self) -> None:
        self._after_end_txn = False

    @contextlib.contextmanager
    def _count(self, kind: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.calls[kind] = self.calls.get(kind, 0) + 1
            self.seconds[kind] = self.seconds.get(kind, 0.0) + time.perf_counter() - start

    def api_version(self, api: ApiKey, cap: int | None = None) -> int | None:
        return self._inner.api_version(api, cap)  # answered from cached ApiVersions: no request

    def find_transaction_coordinator(self, transactional_id: str) -> tuple[int, int]:
        with self._count("FindCoordinator"):
            return self._inner.find_transaction_coordinator(transactional_id)

    def end_txn(
        self,
        node: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        commit: bool,
        version: int,
    ) -> int:
        with self._count("EndTxn"):
            code = self._inner.end_txn(node, transactional_id, producer_id, epoch, commit, version)
        self._after_end_txn = True
        return code

    def init_producer_id(
        self, node: int, transactional_id: str, transaction_timeout_ms: int
    ) -> InitProducerIdAnswer:
        with self._count("InitProducerId"):
            return self._inner.init_producer_id(node, transactional_id, transaction_timeout_ms)

    def partition_leaders(self, topic: str) -> dict[int, int]:
        with self._count("Metadata"):
            return self._inner.partition_leaders(topic)

    def fetch(
        self,
        node: int,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_wait_ms: int,
        with_keys: bool = False,
        max_bytes: int = FETCH_MAX_BYTES,
    ) -> FetchAnswer:
        kind = "Fetch (verify)" if self._after_end_txn else "Fetch (log ends)"
        with self._count(kind):
            return self._inner.fetch(
                node,
                topic,
                partition,
                offset,
                max_wait_ms=max_wait_ms,
                with_keys=with_keys,
                max_bytes=max_bytes,
            )

    def close(self) -> None:
        self._inner.close()


@dataclass
class CommitResult:
    per_commit: list[float]  # sequential commit() of each committable
    calls: dict[str, int]
    seconds: dict[str, float]
    partitions: int
    prepare_seconds: float
    batch_seconds: float  # one commit_all() of as many other committables
    batch_calls: dict[str, int]
    audited_committed: int
    audited_records: int


def prepare_one(config: dict[str, Any], topic: str, index: int, per_txn: int) -> Committable:
    records = [(b"c%03d-%05d" % (index, i), b"v" * 16) for i in range(per_txn)]
    return TransactionalWriter(config, f"bench-{topic}-{index:03d}").write(topic, records)


def bench_commits(
    config: dict[str, Any],
    protocol: KafkaProtocol,
    prefix: str,
    args: argparse.Namespace,
    topics: list[str],
) -> CommitResult:
    topic = f"{prefix}-commits"
    protocol.create_topic(topic, args.partitions)
    topics.append(topic)
    start = time.perf_counter()
    # Preparing is not measured; threads overlap the per-writer connection set-up.
    with ThreadPoolExecutor(max_workers=8) as pool:
        prepared = list(
            pool.map(
                lambda i: prepare_one(config, topic, i, args.txn_records),
                range(2 * args.committables),
            )
        )
    prepare_seconds = time.perf_counter() - start
    one_by_one, batch = prepared[: args.committables], prepared[args.committables :]

    counting = CountingProtocol(protocol)
    controller = TransactionController(counting)
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
            TransactionController(protocol).abort_all(prepared)
    batch_calls = {k: n - sequential_calls.get(k, 0) for k, n in counting.calls.items()}

    report = audit_checked(protocol, topic, prepared)
    return CommitResult(
        per_commit=per_commit,
        calls=sequential_calls,
        seconds=counting.seconds,
        partitions=sum(len(c.partitions) for c in one_by_one),
        prepare_seconds=prepare_seconds,
        batch_seconds=batch_seconds,
        batch_calls=batch_calls,
        audited_committed=sum(1 for v in report.committables if v["state"] == COMMITTED),
        audited_records=report.totals["committed"],
    )


# -- set-up --------------------------------------------------------------------------

# -- report --------------------------------------------------------------------------


def yes_no(ok: bool) -> str:
    return "yes" if ok else "NO"


def print_report(
    args: argparse.Namespace, servers: str, tp: ThroughputResult, cm: CommitResult
) -> bool:
    n, rounds = args.records, args.rounds
    rates = {s: [n / t.wall for t in tp.samples[s]] for s in SIDES}
    ratio_cb = [w / b for w, b in zip(rates[WRITER], rates[IDEM_CB], strict=True)]
    ratio_nocb = [w / b for w, b in zip(rates[WRITER], rates[IDEM_NOCB], strict=True)]
    med_cb, med_nocb = statistics.median(ratio_cb), statistics.median(ratio_nocb)
    expected = n * rounds
    lost_ok = tp.committed == expected and tp.aborted == 0 and tp.open == 0

    def per_round(values: list[float], fmt: str) -> str:
        return " ".join(format(v, fmt) for v in values)

    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print()
    print(
        f"broker {servers}; {n:,} records x {args.value_bytes} B, {args.partitions} partitions; "
        f"{os.cpu_count()} CPUs, load average {load}"
    )
    print(f"(a) writer throughput, {rounds} interleaved rounds (first side rotates)")
    print(f"  {'side':<28}{'median rec/s':>14}{'CPU us/rec':>12}   per round (rec/s)")
    for side in SIDES:
        cpu_us = statistics.median(t.cpu for t in tp.samples[side]) * 1e6 / n
        print(
            f"  {side:<28}{statistics.median(rates[side]):>14,.0f}{cpu_us:>12.2f}   "
            + per_round(rates[side], ",.0f")
        )
    # CPU column of the ratio rows: baseline CPU / writer CPU per record, per-round median
    # (the throughput ratio if both were CPU-bound; steadier than wall time under load).
    for label, base, ratios, med in (
        ("writer / idempotent+cb", IDEM_CB, ratio_cb, med_cb),
        ("writer / idempotent no-cb", IDEM_NOCB, ratio_nocb, med_nocb),
    ):
        cpu_ratio = statistics.median(
            b.cpu / w.cpu for w, b in zip(tp.samples[WRITER], tp.samples[base], strict=True)
        )
        print(f"  {label:<28}{med:>14.3f}{cpu_ratio:>12.3f}   {per_round(ratios, '.3f')}")
    print(
        f"  audit: committed {tp.committed:,} of {expected:,} (aborted {tp.aborted:,}, "
        f"open {tp.open:,}) -> {'OK' if lost_ok else 'RECORDS LOST'}; "
        f"commit of the writer's transactions {tp.commit_seconds:.2f} s"
    )
    print(
        f"  {'fixed cost, 1-record call':<28}{'median ms':>14}   "
        + "; ".join(
            f"{tag} {statistics.median(t.wall for t in tp.fixed[side]) * 1000:.1f}"
            for tag, side in (("writer", WRITER), ("idem+cb", IDEM_CB), ("no-cb", IDEM_NOCB))
        )
    )

    total = sum(cm.per_commit)
    count = len(cm.per_commit)
    commit_target = COMMIT_TARGET_S * count / 100
    ms = sorted(t * 1000 for t in cm.per_commit)
    p95 = ms[min(count - 1, int(0.95 * count))]
    print(
        f"(b) commit {count} committables ({args.txn_records} records each, "
        f"{cm.partitions / count:.1f} partitions each) sequentially, one KafkaProtocol"
    )
    print(
        f"  total {total:.3f} s; per commit mean {total / count * 1000:.1f} ms, "
        f"median {statistics.median(ms):.1f} ms, p95 {p95:.1f} ms, max {ms[-1]:.1f} ms "
        f"(prepare, untimed: {cm.prepare_seconds:.1f} s)"
    )
    print(f"  {'request':<22}{'per commit':>11}{'ms per call':>13}{'ms per commit':>15}")
    order = ["Metadata", "Fetch (log ends)", "FindCoordinator", "EndTxn", "Fetch (verify)"]
    kinds = order + sorted(set(cm.calls) - set(order))
    for kind in (k for k in kinds if k in cm.calls):
        calls, secs = cm.calls[kind], cm.seconds[kind]
        print(
            f"  {kind:<22}{calls / count:>11.2f}{secs / calls * 1000:>13.2f}"
            f"{secs / count * 1000:>15.2f}"
        )
    requests = sum(cm.calls.values())
    print(f"  {'all requests':<22}{requests / count:>11.2f}")
    batch_requests = sum(cm.batch_calls.values())
    print(
        f"  commit_all of {count} other committables at once: {cm.batch_seconds:.3f} s, "
        f"{batch_requests} requests ({batch_requests / count:.2f} per committable: the log is "
        "read once per partition before and after, EndTxn once per committable)"
    )
    total_records = 2 * count * args.txn_records
    commits_ok = cm.audited_committed == 2 * count and cm.audited_records == total_records
    print(
        f"  audit: {cm.audited_committed}/{2 * count} committables COMMITTED, "
        f"{cm.audited_records:,} records -> {'OK' if commits_ok else 'FAILED'}"
    )

    print(
        f"target met: {yes_no(med_cb >= WRITER_RATIO_TARGET)} "
        f"(writer / idempotent+cb {med_cb:.3f} >= {WRITER_RATIO_TARGET})"
    )
    print(
        f"target met: {yes_no(cm.batch_seconds <= commit_target)} "
        f"({count} committables by commit_all {cm.batch_seconds:.3f} s <= {commit_target:g} s; "
        f"one by one {total:.3f} s)"
    )
    print(f"verified:   {yes_no(lost_ok and commits_ok)} (audits: nothing lost, all committed)")
    return lost_ok and commits_ok


def delete_topics(servers: str, topics: list[str]) -> None:
    """Best effort: remove the benchmark's topics from an existing cluster."""
    from confluent_kafka.admin import AdminClient

    if not topics:
        return
    admin = AdminClient({"bootstrap.servers": servers})  # must outlive the futures
    futures = admin.delete_topics(topics)
    for topic, future in futures.items():
        try:
            future.result(30)
        except Exception as exc:
            print(f"could not delete topic {topic}: {exc}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per side/round")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--committables", type=int, default=100)
    parser.add_argument("--txn-records", type=int, default=10, help="records per committable")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--bootstrap-servers", help="use this cluster instead of a local Apache Kafka broker"
    )
    parser.add_argument(
        "--kafka-version",
        default=DEFAULT_KAFKA_VERSION,
        help="Apache Kafka release of the local broker (fetched from Maven Central once)",
    )
    args = parser.parse_args(argv)

    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    topics: list[str] = []
    with contextlib.ExitStack() as stack:
        servers = args.bootstrap_servers
        if not servers:
            servers = stack.enter_context(KafkaBroker(args.kafka_version)).bootstrap_servers
        else:
            stack.callback(delete_topics, servers, topics)  # runs last, even after a failure
        config: dict[str, Any] = {"bootstrap.servers": servers}
        protocol = stack.enter_context(KafkaProtocol(config))
        print(
            f"(a) {args.records:,} records x {args.rounds} rounds x {len(SIDES)} sides", flush=True
        )
        throughput = bench_throughput(config, protocol, prefix, args, topics)
        print(f"(b) {args.committables} commits", flush=True)
        commits = bench_commits(config, protocol, prefix, args, topics)
        ok = print_report(args, servers, throughput, commits)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
