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
  (:func:`devtools.spark_submit.submit_prepare`, same master ``local[2]``) on the
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

Every export is checked afterwards on the shared harness: each side's topic must hold exactly
rows x rounds committed records (log audit, read_committed consumer, no key twice, nothing
open), both sides the same records (digest of keys and values), and the DAG side's ledger
batches COMMITTED. The exit status is 1 when a check fails.

Run (about 5 minutes with the defaults on an idle 2-core machine):

    python benchmarks/bench_orchestration.py [--rows 10000 --partitions 4 --rounds 3]
        [--bootstrap-servers HOST:PORT]

Scratch files (Airflow home, manifests, spark-submit logs, Airflow's output) go to
/tmp/kafka2pc-bench/orchestration, emptied at the start.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from harness import (
    Cluster,
    Expected,
    Results,
    Round,
    Run,
    add_cluster_arguments,
    fmt,
    interleave,
    measure,
    median,
    print_results,
    verify_topic,
)

from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from airflow_provider_kafka2pc.transaction.manifest import Manifest
from devtools.demo import (
    DAG_ID,
    GROUP_ID,
    Redirected,
    airflow_environment,
    load_example_dag,
    run_interval,
)
from devtools.spark_submit import LOCAL_CONF, submit_prepare

WORK_DIR = Path("/tmp/kafka2pc-bench/orchestration")
#: Interval ``r`` (round r; 0 is the warm-up) is the day FIRST_DAY + r.
FIRST_DAY = datetime(2026, 10, 1, tzinfo=UTC)
DAG = "DAG (dag.test)"
DIRECT = "direct"
TASKS = ("recover", "prepare", "decide", "commit")
SPARK_SUBMIT = "spark-submit"
#: Spark's own defaults of the settings ``submit_prepare`` changes (Spark's configuration docs).
SPARK_DEFAULTS = {"spark.ui.enabled": "true", "spark.sql.shuffle.partitions": "200"}

#: The terminal: fds 1 and 2 go to Airflow's output file while the benchmark runs.
CONSOLE = sys.stdout


def say(text: str = "") -> None:
    print(text, file=CONSOLE, flush=True)


class Orchestration:
    def __init__(self, args: argparse.Namespace, cluster: Cluster) -> None:
        self.args, self.cluster = args, cluster
        # As many Kafka partitions as transactions: each side's export is aligned with Kafka,
        # the default wherever it applies.
        self.topics = {
            DAG: cluster.topic("orch-dag", args.partitions),
            DIRECT: cluster.topic("orch-direct", args.partitions),
        }
        self.dag: Any = None
        self.spark_submit_seconds: list[float] = []

    def set_up(self) -> None:
        os.environ.update(
            airflow_environment(
                WORK_DIR / "airflow",
                self.cluster.servers,
                topic=self.topics[DAG],
                start_date=FIRST_DAY,
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
        very same Spark job: the local defaults ``submit_prepare`` adds go back to Spark's
        own, the task's ``conf`` is applied as the operator applies it."""
        task = self.dag.get_task(f"{GROUP_ID}.prepare")
        return {**{k: SPARK_DEFAULTS[k] for k in LOCAL_CONF}, **(task.conf or {})}

    # -- the two sides ----------------------------------------------------------------------

    def run_dag(self, rnd: Round) -> Run:
        day = FIRST_DAY + timedelta(days=rnd.number)
        submits = len(self.spark_submit_seconds)
        with measure(self.cluster.broker_pid) as meter:
            dag_run = run_interval(self.dag, day)
        tis = dag_run.get_task_instances()
        states = {
            ti.task_id.split(".")[-1]: str(getattr(ti.state, "value", ti.state)) for ti in tis
        }
        if states.get("commit") != "success":
            raise SystemExit(f"the DAG run of {day:%Y-%m-%d} did not commit: {states}")
        took = {
            ti.task_id.split(".")[-1]: (ti.end_date - ti.start_date).total_seconds()
            for ti in tis
            if ti.start_date and ti.end_date
        }
        parts = {task: took[task] for task in TASKS if task in took}
        parts["between tasks"] = meter.seconds - sum(parts.values())
        parts[SPARK_SUBMIT] = sum(self.spark_submit_seconds[submits:])
        return Run(DAG, self.args.rows, meter, None, parts)

    def run_direct(self, rnd: Round) -> Run:
        day = FIRST_DAY + timedelta(days=rnd.number)
        run = f"direct-{self.cluster.prefix}-{day:%Y%m%d}"
        manifest = WORK_DIR / f"{run}.manifest.json"
        ids = [f"bench-{run}-{i}" for i in range(self.args.partitions)]
        sql = self.source_sql(day)
        with measure(self.cluster.broker_pid) as meter:
            start = time.perf_counter()
            done = submit_prepare(
                [
                    *("--source-sql", sql, "--topic", self.topics[DIRECT]),
                    *("--key-column", "order_id", "--bootstrap-servers", self.cluster.servers),
                    *("--transactional-ids", ",".join(ids), "--job-label", run),
                    *("--manifest", str(manifest)),
                ],
                conf=self.operator_conf(),
                log_path=WORK_DIR / f"{run}.spark.log",
            )
            if done.returncode != 0:
                raise SystemExit(f"spark-submit failed; see {WORK_DIR / f'{run}.spark.log'}")
            prepared = Manifest.from_json(manifest.read_text())
            submitted = time.perf_counter()
            results = TransactionController(self.cluster.protocol).commit_all(prepared.committables)
            end = time.perf_counter()
        bad = [r for r in results if r.outcome is not Outcome.COMMITTED]
        if bad or prepared.source_rows != self.args.rows:
            raise SystemExit(f"direct export of {day:%Y-%m-%d}: {prepared.source_rows} rows, {bad}")
        parts = {SPARK_SUBMIT: submitted - start, "commit_all": end - submitted}
        return Run(DIRECT, self.args.rows, meter, None, parts)

    # -- checks -----------------------------------------------------------------------------

    def verify(self, exports: int) -> list[tuple[str, bool]]:
        """Both topics hold every interval once, the same records; the ledger says COMMITTED."""
        from airflow_provider_kafka2pc.ledger import BatchState, Ledger

        rows = self.args.rows * exports
        direct = verify_topic(self.cluster, self.topics[DIRECT], Expected(rows))
        dag = verify_topic(self.cluster, self.topics[DAG], Expected(rows, digest=direct.digest))
        checks = [
            (f"{side}: {check.summary()}", check.ok)
            for side, check in ((DIRECT, direct), (DAG, dag))
        ]
        with Ledger(Ledger.default_url()) as ledger:
            states = [
                ledger.get(f"{DAG_ID}.{GROUP_ID}", _run_key(FIRST_DAY + timedelta(days=r)))
                for r in range(exports)
            ]
        checks.append(
            (
                f"{DAG}: the ledger has all {exports} intervals COMMITTED",
                all(b is not None and b.state is BatchState.COMMITTED for b in states),
            )
        )
        return checks


def _run_key(day: datetime) -> str:
    return f"{day.isoformat()}/{(day + timedelta(days=1)).isoformat()}"


def report(args: argparse.Namespace, results: Results, checks: list[tuple[str, bool]]) -> bool:
    for text, ok in checks:
        say(f"  verified {'OK' if ok else 'FAILED'}: {text}")
    cold = ", ".join(f"{r.side} {r.seconds:.2f} s" for r in results.warmups)
    title = f"{args.rows:,} rows, {args.partitions} partitions; cold (first export here): {cold}"
    print_results(results, title, [(DAG, DIRECT)], verification=False, say=say)
    dag, direct = results.runs[DAG], results.runs[DIRECT]
    overhead = [a.seconds - b.seconds for a, b in zip(dag, direct, strict=True)]
    outside = [
        (a.seconds - a.parts[SPARK_SUBMIT]) - (b.seconds - b.parts[SPARK_SUBMIT])
        for a, b in zip(dag, direct, strict=True)
    ]
    direct_s = median([r.seconds for r in direct])
    say(
        f"  orchestration overhead: {fmt(median(overhead), '+.2f')} s per run; outside the Spark "
        f"job (each side minus its own spark-submit, steadier): {fmt(median(outside), '+.2f')} s "
        f"per run, as a ratio on one and the same Spark job "
        f"{fmt((direct_s + median(outside)) / direct_s)}"
    )
    return all(ok for _, ok in checks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000, help="orders per interval")
    parser.add_argument("--partitions", type=int, default=4, help="Spark partitions = transactions")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (plus one warm-up)")
    add_cluster_arguments(parser)
    args = parser.parse_args(argv)

    shutil.rmtree(WORK_DIR, ignore_errors=True)
    WORK_DIR.mkdir(parents=True)
    global CONSOLE
    CONSOLE = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    with contextlib.ExitStack() as stack:
        # Airflow's, Spark's and the Kafka clients' output: a file; the report: the terminal.
        stack.enter_context(Redirected(WORK_DIR / "airflow-output.log"))
        cluster = stack.enter_context(Cluster.from_args(args, data_dir=WORK_DIR / "kafka"))
        bench = Orchestration(args, cluster)
        start = time.perf_counter()
        bench.set_up()
        say(
            f"{cluster.describe()}; Airflow set up (import, metadata DB, DAG parsed) in "
            f"{time.perf_counter() - start:.1f} s; {args.rounds} rounds + 1 warm-up, sides "
            f"interleaved; Airflow's output: {WORK_DIR / 'airflow-output.log'}"
        )
        results = interleave({DAG: bench.run_dag, DIRECT: bench.run_direct}, args.rounds, say=say)
        say("\nverification (every interval's records, both sides, at the end):")
        ok = report(args, results, bench.verify(args.rounds + 1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
