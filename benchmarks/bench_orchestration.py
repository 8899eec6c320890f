"""What orchestration costs: a whole DAG run against the same two phases called directly.

Both sides export the same data, one day of the example DAG's orders (``dags/orders_export.py``:
``--rows`` orders from Spark SQL over ``range()``, keyed by ``order_id``, ``--partitions`` Spark
partitions = Kafka transactions), each into a topic of its own on the same broker:

- DAG: ``dag.test()`` of the example DAG for one interval, in this process (Airflow imported,
  metadata DB migrated and the DAG parsed beforehand, once): recover -> prepare (the
  ``SparkSubmitOperator`` subclass submits the packaged application) -> decide -> commit, with
  the coordinator ledger (SQLite under the benchmark's ``AIRFLOW_HOME``), the task state store,
  XCom, the asset event and dag.test()'s own scheduling loop. Timed from the call to its return.
- direct: the same prepare, ``spark-submit`` of the same packaged application
  (:func:`airflow_provider_kafka2pc.spark.submit.submit_prepare`, same master ``local[2]``) on the
  same SQL rendered for the same interval, its manifest read, then one
  ``TransactionController.commit_all`` of its committables. No ledger, no decision, no Airflow.

Every round exports a new interval on both sides, back to back, the order alternating
between rounds; a first, unmeasured round warms both sides (this process's first task pays
imports and the ledger's migration; it is printed apart as "cold"). Reported: per round and as
medians, each side's seconds, the overhead (DAG - direct) in seconds and the ratio DAG/direct,
and where the DAG's time goes (each task's duration as Airflow recorded it, and the rest:
dag.test()'s loop between tasks). Two separate spark-submits of the same job differ by
seconds on a busy machine, more than the orchestration costs, so the overhead is also given
outside the Spark job: each side's time minus its own spark-submit (the DAG side's is timed
by wrapping ``SparkSubmitHook.submit`` in this process, where dag.test() runs the operator).
The machine is noisy; only side-by-side numbers mean anything.

Every export is checked afterwards: the log audit (markers applied by us) must find each
side's topic holding exactly rows x rounds committed records, no key twice, nothing open, and
the DAG side's ledger batches COMMITTED. The exit status is 1 when a check fails.

Run (about 5 minutes with the defaults on an idle 2-core machine):

    python benchmarks/bench_orchestration.py [--rows 10000 --partitions 4 --rounds 3]
        [--bootstrap-servers HOST:PORT]

Scratch files (Airflow home, manifests, spark-submit logs, Airflow's output) go to
/tmp/bench-orchestration, emptied at the start.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

# Shared with the other benchmarks: topic cleanup on an external cluster, medians, yes/no.
from bench_spark_prepare import median, yes_no
from bench_transaction_core import delete_topics

from airflow_provider_kafka2pc.broker import DEFAULT_KAFKA_VERSION, KafkaBroker
from airflow_provider_kafka2pc.demo import (
    DAG_ID,
    GROUP_ID,
    Redirected,
    airflow_environment,
    load_example_dag,
    run_interval,
)
from airflow_provider_kafka2pc.spark.submit import DEFAULT_CONF as SUBMIT_DEFAULT_CONF
from airflow_provider_kafka2pc.spark.submit import submit_prepare
from airflow_provider_kafka2pc.transaction.audit import audit_topic
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from airflow_provider_kafka2pc.transaction.manifest import Manifest
from airflow_provider_kafka2pc.transaction.protocol import KafkaProtocol

WORK_DIR = Path("/tmp/bench-orchestration")
TOPIC_PARTITIONS = 3
#: Interval ``r`` (round r; 0 is the warm-up) is the day FIRST_DAY + r.
FIRST_DAY = datetime(2026, 10, 1, tzinfo=UTC)
DAG = "DAG (dag.test)"
DIRECT = "direct"
TASKS = ("recover", "prepare", "decide", "commit")
#: Spark's own defaults of the settings submit.py changes (Spark's configuration docs).
SPARK_DEFAULTS = {"spark.ui.enabled": "true", "spark.sql.shuffle.partitions": "200"}


@dataclass
class Round:
    number: int
    seconds: dict[str, float] = field(default_factory=dict)
    #: DAG side: each task's duration as Airflow recorded it.
    tasks: dict[str, float] = field(default_factory=dict)
    #: direct side: spark-submit alone, commit_all alone.
    direct_parts: dict[str, float] = field(default_factory=dict)

    #: DAG side: the spark-submit inside the prepare task (the same job as direct's).
    dag_spark_submit: float = 0.0

    @property
    def outside_spark(self) -> dict[str, float]:
        """Each side's time outside its spark-submit: what orchestration adds, without the
        noise of two separate Spark jobs."""
        return {
            DAG: self.seconds[DAG] - self.dag_spark_submit,
            DIRECT: self.seconds[DIRECT] - self.direct_parts["spark-submit"],
        }

    @property
    def overhead_outside_spark(self) -> float:
        return self.outside_spark[DAG] - self.outside_spark[DIRECT]

    @property
    def overhead(self) -> float:
        return self.seconds[DAG] - self.seconds[DIRECT]

    @property
    def ratio(self) -> float:
        return self.seconds[DAG] / self.seconds[DIRECT]

    @property
    def between_tasks(self) -> float:
        return self.seconds[DAG] - sum(self.tasks.values())


class Bench:
    def __init__(self, args: argparse.Namespace, bootstrap: str, protocol: KafkaProtocol) -> None:
        self.args = args
        self.bootstrap = bootstrap
        self.protocol = protocol
        suffix = uuid.uuid4().hex[:8]
        self.topics = {DAG: f"bench-orch-dag-{suffix}", DIRECT: f"bench-orch-direct-{suffix}"}
        self.suffix = suffix
        self.dag: Any = None
        self.spark_submit_seconds: list[float] = []

    def set_up(self) -> None:
        for topic in self.topics.values():
            self.protocol.create_topic(topic, TOPIC_PARTITIONS)
        os.environ.update(
            airflow_environment(
                WORK_DIR / "airflow", self.bootstrap, topic=self.topics[DAG], start_date=FIRST_DAY
            )
        )
        os.environ["KAFKA2PC_ORDERS_ROWS"] = str(self.args.rows)
        os.environ["KAFKA2PC_ORDERS_PARTITIONS"] = str(self.args.partitions)
        self.dag = load_example_dag()
        self._time_spark_submit()

    def _time_spark_submit(self) -> None:
        """Probe: dag.test() runs the operator in this process, so the time its spark-submit
        takes (SparkSubmitHook.submit, which runs the command to its end) can be read apart
        from the orchestration around it. Behaviour is unchanged."""
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        original = SparkSubmitHook.submit
        timings = self.spark_submit_seconds

        def submit(hook: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(hook, *args, **kwargs)
            finally:
                timings.append(time.perf_counter() - start)

        SparkSubmitHook.submit = submit  # type: ignore[method-assign]

    def source_sql(self, day: datetime) -> str:
        """The prepare task's own source template, rendered for the interval as Airflow does."""
        import pendulum

        template = self.dag.get_task(f"{GROUP_ID}.prepare").source["sql"]
        return (
            self.dag.get_template_env()
            .from_string(template)
            .render(
                data_interval_start=pendulum.instance(day),
                data_interval_end=pendulum.instance(day + timedelta(days=1)),
            )
        )

    def operator_conf(self) -> dict[str, str]:
        """The Spark settings the prepare operator submits with, so that both sides run the
        very same Spark job: submit.py's defaults it does not share go back to Spark's own."""
        from airflow_provider_kafka2pc.operators.prepare import DEFAULT_SPARK_CONF

        task = self.dag.get_task(f"{GROUP_ID}.prepare")
        conf = {**DEFAULT_SPARK_CONF, **(task.conf or {})}
        for key in SUBMIT_DEFAULT_CONF:
            if key not in conf and key in SPARK_DEFAULTS:
                conf[key] = SPARK_DEFAULTS[key]
        return conf

    # -- the two sides ----------------------------------------------------------------------

    def run_dag(self, day: datetime, result: Round) -> None:
        submits = len(self.spark_submit_seconds)
        start = time.perf_counter()
        dag_run = run_interval(self.dag, day)
        result.seconds[DAG] = time.perf_counter() - start
        result.dag_spark_submit = sum(self.spark_submit_seconds[submits:])
        tis = dag_run.get_task_instances()
        states = {
            ti.task_id.split(".")[-1]: str(getattr(ti.state, "value", ti.state)) for ti in tis
        }
        if states.get("commit") != "success":
            raise SystemExit(f"the DAG run of {day:%Y-%m-%d} did not commit: {states}")
        for ti in tis:
            name = ti.task_id.split(".")[-1]
            if name in TASKS and ti.start_date and ti.end_date:
                result.tasks[name] = (ti.end_date - ti.start_date).total_seconds()

    def run_direct(self, day: datetime, result: Round) -> None:
        run = f"direct-{self.suffix}-{day:%Y%m%d}"
        manifest = WORK_DIR / f"{run}.manifest.json"
        ids = [f"bench-{run}-{i}" for i in range(self.args.partitions)]
        sql = self.source_sql(day)
        start = time.perf_counter()
        done = submit_prepare(
            [
                "--source-sql",
                sql,
                "--topic",
                self.topics[DIRECT],
                "--key-column",
                "order_id",
                "--bootstrap-servers",
                self.bootstrap,
                "--transactional-ids",
                ",".join(ids),
                "--run-id",
                run,
                "--manifest",
                str(manifest),
            ],
            conf=self.operator_conf(),
            log_path=WORK_DIR / f"{run}.spark.log",
        )
        if done.returncode != 0:
            raise SystemExit(f"spark-submit failed; see {WORK_DIR / f'{run}.spark.log'}")
        prepared = Manifest.from_json(manifest.read_text())
        submitted = time.perf_counter()
        results = TransactionController(self.protocol).commit_all(prepared.committables)
        end = time.perf_counter()
        bad = [r for r in results if r.outcome is not Outcome.COMMITTED]
        if bad or prepared.source_rows != self.args.rows:
            raise SystemExit(f"direct export of {day:%Y-%m-%d}: {prepared.source_rows} rows, {bad}")
        result.seconds[DIRECT] = end - start
        result.direct_parts = {"spark-submit": submitted - start, "commit_all": end - submitted}

    def round(self, number: int) -> Round:
        day = FIRST_DAY + timedelta(days=number)
        result = Round(number)
        sides = [self.run_dag, self.run_direct]
        for side in sides if number % 2 == 0 else reversed(sides):
            side(day, result)
        return result

    # -- checks -----------------------------------------------------------------------------

    def verify(self, rounds: int) -> list[tuple[str, bool]]:
        from airflow_provider_kafka2pc.ledger import BatchState, Ledger

        expected = self.args.rows * rounds
        checks = []
        for side, topic in self.topics.items():
            report = audit_topic(self.protocol, topic, duplicates=True)
            totals, dupes = report.totals, (report.duplicates or {})["extra_copies"]
            checks.append(
                (
                    f"{side}: {expected:,} records committed once each, nothing open "
                    f"(audit: {totals['committed']:,} committed, {totals['open']} open, "
                    f"{dupes} extra copies)",
                    totals["committed"] == expected and totals["open"] == 0 and dupes == 0,
                )
            )
        with Ledger(Ledger.default_url()) as ledger:
            states = [
                ledger.get(f"{DAG_ID}.{GROUP_ID}", _run_key(FIRST_DAY + timedelta(days=r)))
                for r in range(rounds)
            ]
        checks.append(
            (
                f"{DAG}: the ledger has all {rounds} intervals COMMITTED",
                all(b is not None and b.state is BatchState.COMMITTED for b in states),
            )
        )
        return checks


def _run_key(day: datetime) -> str:
    return f"{day.isoformat()}/{(day + timedelta(days=1)).isoformat()}"


# -- report -----------------------------------------------------------------------------------

#: The terminal: fds 1 and 2 go to Airflow's output file while the benchmark runs.
CONSOLE = sys.stdout


def say(*args: Any, **kwargs: Any) -> None:
    print(*args, **kwargs, file=CONSOLE, flush=True)


def print_round(result: Round, tag: str) -> None:
    tasks = ", ".join(f"{t} {result.tasks.get(t, 0):.2f}" for t in TASKS)
    parts = ", ".join(f"{k} {v:.2f}" for k, v in result.direct_parts.items())
    say(
        f"  {tag:<8} {DAG} {result.seconds[DAG]:6.2f} s [{tasks}, between tasks "
        f"{result.between_tasks:.2f}]\n"
        f"  {'':<8} {DIRECT:<14} {result.seconds[DIRECT]:6.2f} s [{parts}]\n"
        f"  {'':<8} overhead {result.overhead:+.2f} s, ratio {result.ratio:.2f}; outside the "
        f"Spark job: DAG {result.outside_spark[DAG]:.2f} s (its spark-submit "
        f"{result.dag_spark_submit:.2f}), direct {result.outside_spark[DIRECT]:.2f} s",
    )


def report(args: argparse.Namespace, measured: list[Round], checks: list[tuple[str, bool]]) -> bool:
    say(f"\nmedians of {len(measured)} rounds ({args.rows:,} rows, {args.partitions} partitions):")
    dag = median([r.seconds[DAG] for r in measured])
    direct = median([r.seconds[DIRECT] for r in measured])
    overhead = median([r.overhead for r in measured])
    ratio = median([r.ratio for r in measured])
    say(f"  {DAG:<16} {dag:6.2f} s")
    for task in TASKS:
        say(f"    {task:<14} {median([r.tasks.get(task, 0) for r in measured]):6.2f} s")
    say(f"    {'between tasks':<14} {median([r.between_tasks for r in measured]):6.2f} s")
    spark = median([r.dag_spark_submit for r in measured])
    say(f"    (spark-submit  {spark:6.2f} s, inside prepare)")
    say(f"  {DIRECT:<16} {direct:6.2f} s")
    for part in ("spark-submit", "commit_all"):
        say(f"    {part:<14} {median([r.direct_parts[part] for r in measured]):6.2f} s")
    say(f"  orchestration overhead: {overhead:+.2f} s per run; ratio DAG/direct {ratio:.2f}")
    outside = median([r.overhead_outside_spark for r in measured])
    say(
        f"  the same outside the Spark job (each side minus its own spark-submit, steadier): "
        f"{outside:+.2f} s per run; DAG {median([r.outside_spark[DAG] for r in measured]):.2f} s"
        f" vs direct {median([r.outside_spark[DIRECT] for r in measured]):.2f} s; as a ratio on "
        f"one and the same Spark job: {(direct + outside) / direct:.2f}"
    )
    say()
    for text, ok in checks:
        say(f"verified: {yes_no(ok)} ({text})")
    return all(ok for _, ok in checks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000, help="orders per interval")
    parser.add_argument("--partitions", type=int, default=4, help="Spark partitions = transactions")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (plus one warm-up)")
    parser.add_argument(
        "--bootstrap-servers", help="an Apache Kafka cluster instead of a local one"
    )
    parser.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    args = parser.parse_args(argv)

    shutil.rmtree(WORK_DIR, ignore_errors=True)
    WORK_DIR.mkdir(parents=True)
    global CONSOLE
    CONSOLE = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    with contextlib.ExitStack() as stack:
        # Airflow's, Spark's and the Kafka clients' output: a file; the report: the terminal.
        stack.enter_context(Redirected(WORK_DIR / "airflow-output.log"))
        bootstrap = args.bootstrap_servers
        if not bootstrap:
            broker = KafkaBroker(args.kafka_version, data_dir=WORK_DIR / "kafka")
            bootstrap = stack.enter_context(broker).bootstrap_servers
        protocol = stack.enter_context(KafkaProtocol({"bootstrap.servers": bootstrap}))
        bench = Bench(args, bootstrap, protocol)
        if args.bootstrap_servers:
            stack.callback(delete_topics, bootstrap, list(bench.topics.values()))
        start = time.perf_counter()
        bench.set_up()
        say(
            f"Airflow set up (import, metadata DB, DAG parsed) in {time.perf_counter() - start:.1f}"
            f" s; {args.rounds} rounds + 1 warm-up, sides interleaved; Airflow's output: "
            f"{WORK_DIR / 'airflow-output.log'}"
        )
        print_round(bench.round(0), "cold")
        measured = []
        for number in range(1, args.rounds + 1):
            measured.append(bench.round(number))
            print_round(measured[-1], f"round {number}")
        ok = report(args, measured, bench.verify(args.rounds + 1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
