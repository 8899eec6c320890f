"""The Python hot path alone: Arrow batches into one transaction, CPU per record.

Why: the prepare's Python workers spend their CPU in the per-record path (Arrow columns to
Python objects, one ``produce()`` and one delivery report per record). This measures that
path without Spark, so a profile (``py-spy record -- python benchmarks/bench_hot_path.py``)
shows nothing else: ``--rows`` generated records (a 16-byte key, a ~130-byte value) as a
binary Arrow table cut into ``--batch-rows`` batches, as ``mapInArrow`` hands them over,
written by the package's own partition-writer path (``partition_writer._chunks`` into
``TransactionalWriter.write_chunks``) into ONE transaction on one Kafka partition (a topic
of one partition: what each transaction writes when aligned with Kafka), each write in a
process of its own. An untimed warm-up write first (the broker's JIT), then ``--rounds``
rounds, the order of the runs rotating each round. Every transaction is committed and
verified (log audit, read_committed count) before any figure is printed.

Printed per variant (``--variants``: ``produce``, one ``produce()`` per record;
``produce_batch``, one ``produce_batch`` call per Arrow batch): wall seconds and the
process's CPU seconds (librdkafka's threads included), each per record. With
``--before DIR``, the same is run with the package found in DIR instead (an export of an
older commit: ``git archive <commit> airflow_provider_kafka2pc | tar -x -C DIR``), whose
partition writer had ``_records`` (a tuple per record): the before/after of one change.
With ``--py-spy DIR``, each variant runs under ``py-spy record`` (folded stacks, which
``--py-spy`` then sums by function: where the per-record time goes).

Run: ``python benchmarks/bench_hot_path.py [--rows 2000000 --variants produce,produce_batch]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

VARIANTS = ("produce", "produce_batch")
HERE = Path(__file__).resolve().parent


def arrow_batches(rows: int, batch_rows: int) -> list:
    """The records as Arrow batches of binary key/value columns, as Spark hands them over."""
    import pyarrow as pa
    from harness import key_of, value_of

    from airflow_provider_kafka2pc.spark.partition_writer import KEY, VALUE

    batches = []
    for start in range(0, rows, batch_rows):
        stop = min(rows, start + batch_rows)
        keys = pa.array([key_of(i) for i in range(start, stop)], pa.binary())
        values = pa.array([value_of(i) for i in range(start, stop)], pa.binary())
        batches.append(pa.RecordBatch.from_arrays([keys, values], names=[KEY, VALUE]))
    return batches


def write_once(servers: str, topic: str, variant: str, batches: list) -> dict:
    """One transaction of every batch through the partition writer's path; its cost."""
    from airflow_provider_kafka2pc.spark import partition_writer as pw
    from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter

    counter = pw._Counter()
    options = {"batch_produce": True} if variant == "produce_batch" else {}
    writer = TransactionalWriter(
        {"bootstrap.servers": servers},
        f"{topic}-{variant}",
        transaction_timeout_ms=600_000,
        **options,
    )
    cpu, wall = time.process_time(), time.perf_counter()
    if hasattr(pw, "_chunks"):
        committable = writer.write_chunks(topic, pw._chunks(iter(batches), [], counter, None))
    else:  # an older package: one tuple per record
        committable = writer.write(topic, pw._records(iter(batches), [], counter, None))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"cpu": cpu, "wall": wall, "committable": committable.to_json(), "rows": counter.rows}


def leaf_shares(folded: Path, top: int = 8) -> list[str]:
    """The functions most samples of a py-spy folded-stack file were in (their own time),
    as percentages of the samples taken while writing (``write_once``)."""
    own: dict[str, int] = {}
    total = 0
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "write_once" not in stack or not count.isdigit():
            continue
        leaf = stack.rsplit(";", 1)[-1]
        name = leaf.split(" (")[0] + " (" + leaf.rsplit("/", 1)[-1].split(" (")[-1]
        own[name] = own.get(name, 0) + int(count)
        total += int(count)
    ranked = sorted(own.items(), key=lambda kv: -kv[1])[:top]
    return [f"{100 * n / total:5.1f}%  {name}" for name, n in ranked] if total else []


def child(args: argparse.Namespace) -> int:
    """Runs in a process of its own (``--child``): build the batches, write, print JSON."""
    batches = arrow_batches(args.rows, args.batch_rows)
    result = write_once(args.bootstrap_servers, args.topic, args.child, batches)
    print(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--batch-rows", type=int, default=10_000, help="Spark's Arrow batch")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--rounds", type=int, default=2, help="the order rotates each round")
    parser.add_argument("--before", type=Path, help="also run the package exported in DIR")
    parser.add_argument(
        "--py-spy",
        type=Path,
        help="run each variant under py-spy, folded stacks into DIR/<run>-<variant>.txt",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap-servers", help="an existing cluster instead of a local broker")
    args = parser.parse_args(argv)
    if args.child:
        return child(args)

    from harness import Cluster, machine_line

    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    runs = [("after", v, None) for v in variants]
    if args.before:
        runs.insert(0, ("before", "produce", args.before.resolve()))
    with Cluster(args.bootstrap_servers) as cluster:
        print(f"{cluster.describe()}; {args.rows:,} rows; {machine_line()}", flush=True)
        # Untimed: the broker's first transaction pays its JIT warm-up.
        warm = run_child(cluster, args, "warmup", "produce", None, min(args.rows, 200_000))
        print(f"  warm-up: {warm[2]}", flush=True)
        results = []
        for number in range(1, args.rounds + 1):
            shift = number % len(runs)
            for label, variant, package in runs[shift:] + runs[:shift]:
                result, ok, summary = run_child(
                    cluster, args, label, variant, package, args.rows, f"r{number}"
                )
                results.append((number, label, variant, result, ok, summary))
                print(f"  r{number} {label} {variant}: {summary}", flush=True)
    print("\nverification (commit, log audit, read_committed):")
    for number, label, variant, _, ok, summary in results:
        print(f"  {'OK' if ok else 'FAILED':<6} r{number} {label} {variant}: {summary}")
    print(f"\n{args.rows:,} rows, one transaction, one partition; {machine_line()}")
    print("  round  run     variant         wall s  CPU s  wall us/rec  CPU us/rec")
    for number, label, variant, r, _, _ in results:
        print(
            f"  r{number:<5} {label:<7} {variant:<14} {r['wall']:7.2f} {r['cpu']:6.2f} "
            f"{r['wall'] / args.rows * 1e6:12.2f} {r['cpu'] / args.rows * 1e6:11.2f}"
        )
    if args.py_spy:
        for number, label, variant, *_ in results:
            print(f"\npy-spy, r{number} {label} {variant}: own samples while writing")
            for line in leaf_shares(args.py_spy / f"r{number}-{label}-{variant}.txt"):
                print(f"  {line}")
    return 0 if all(ok for *_, ok, _ in results) else 1


def run_child(
    cluster: Any,
    args: argparse.Namespace,
    label: str,
    variant: str,
    package: Path | None,
    rows: int,
    tag: str = "",
) -> tuple[dict, bool, str]:
    """One write in a process of its own (under py-spy when asked), then its commit and
    verification: (the child's figures, verified, the check's summary)."""
    from harness import Expected, verify_topic

    from airflow_provider_kafka2pc.transaction.committable import Committable
    from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController

    topic = cluster.topic(f"hot-{tag}-{label}-{variant.replace('_', '-')}", 1)
    paths = [str(package)] if package else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, str(HERE)])}
    spy: list[str] = []
    if args.py_spy and label != "warmup":
        args.py_spy.mkdir(parents=True, exist_ok=True)
        folded = args.py_spy / f"{tag}-{label}-{variant}.txt"
        spy = [str(Path(sys.executable).with_name("py-spy")), "record", "--format"]
        spy += ["raw", "--rate", "200", "--output", str(folded), "--"]
    done = subprocess.run(
        [
            *spy,
            sys.executable,
            __file__,
            *("--child", variant, "--topic", topic, "--rows", str(rows)),
            *("--batch-rows", str(args.batch_rows)),
            *("--bootstrap-servers", cluster.servers),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{label} {variant} failed:\n{done.stderr[-3000:]}")
    result = json.loads(next(x for x in reversed(done.stdout.splitlines()) if x.startswith("{")))
    committable = Committable.from_json(result["committable"])
    outcome = TransactionController(cluster.protocol).commit(committable).outcome
    check = verify_topic(cluster, topic, Expected(rows, content=False, committables=[committable]))
    ok = outcome is Outcome.COMMITTED and check.ok and committable.record_count == rows
    cluster.delete_topics([topic])
    return result, ok, check.summary()


if __name__ == "__main__":
    sys.exit(main())
