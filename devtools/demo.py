"""``make demo``: the example DAG exports one day of orders exactly once, proved from the log.

``python -m devtools demo``, from a checkout (``dags/`` and ``devtools/`` are not installed).

Everything is set up here, on a fresh machine too: a local Apache Kafka broker (one
KRaft node, its data and port kept in ``.kafka2pc-demo/kafka``), an Airflow home in
``.kafka2pc-demo/airflow`` (metadata DB migrated here; the ``kafka`` and ``spark``
connections given as ``AIRFLOW_CONN_*`` JSON; the coordinator ledger is the embedded
default, SQLite under ``AIRFLOW_HOME``), and the topic ``orders``. Then
``dags/orders_export.py`` runs with ``dag.test()`` for one fixed data interval: recover,
prepare (spark-submit on ``local[2]``, one open Kafka transaction per Spark partition),
decide, commit.

The proof does not trust the DAG: the log audit reads every record of the topic raw and
applies the commit/abort markers itself, and an ordinary read_committed consumer reads
the topic as downstream applications do. Both must see the interval's orders once each,
nothing open. Run it again: the ledger has the interval COMMITTED, so nothing is written
(``written`` 0). The last line is one JSON object; the exit status is 1 unless exactly once.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow_provider_kafka2pc.errors import ProtocolError
from airflow_provider_kafka2pc.ledger import Batch, BatchState, Ledger
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.transaction.audit import AuditReport, audit_topic

from .broker import KafkaBroker
from .visible import Visible, read_committed

REPO = Path(__file__).resolve().parents[1]
DAGS_FOLDER = REPO / "dags"
DAG_ID = "orders_export"
GROUP_ID = "export_orders"
TOPIC = "orders"
TOPIC_PARTITIONS = 4
#: The one interval the demo exports, every time: a re-run must write nothing.
INTERVAL_START = datetime(2026, 11, 20, tzinfo=UTC)
INTERVAL_END = INTERVAL_START + timedelta(days=1)
#: The export's identity and run key, as the DAG's TaskGroup derives them (export.py):
#: "<dag_id>.<group_id>" and the data interval.
EXPORT_ID = f"{DAG_ID}.{GROUP_ID}"
RUN_KEY = f"{INTERVAL_START.isoformat()}/{INTERVAL_END.isoformat()}"
#: Where the demo keeps everything (default: .kafka2pc-demo in the checkout).
DEMO_DIR_ENV = "KAFKA2PC_DEMO_DIR"


@dataclass
class Paths:
    root: Path

    @property
    def kafka(self) -> Path:
        return self.root / "kafka"

    @property
    def airflow_home(self) -> Path:
        return self.root / "airflow"

    @property
    def dag_test_log(self) -> Path:
        return self.root / "dag-test.log"


def demo_paths() -> Paths:
    return Paths(Path(os.environ.get(DEMO_DIR_ENV) or REPO / ".kafka2pc-demo").resolve())


def airflow_environment(
    home: Path, bootstrap: str, *, topic: str = TOPIC, start_date: datetime = INTERVAL_START
) -> dict[str, str]:
    """Everything Airflow and the example DAG need, as environment: set before airflow is
    imported. ``start_date`` must not lie after the first interval to be run."""
    import pyspark

    spark_bin = Path(pyspark.__file__).parent / "bin"
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # The official providers' connections, no metadata DB rows needed.
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
        ),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        # pip's pyspark ships spark-submit but does not put it on PATH.
        "PATH": f"{spark_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "KAFKA2PC_ORDERS_START_DATE": start_date.date().isoformat(),
        "KAFKA2PC_ORDERS_TOPIC": topic,
    }


#: Settings from the surrounding shell that would point the demo at another Airflow, ledger
#: or source; the demo is self-contained, so it drops them (its own are set after).
OUTSIDE_SETTINGS = (
    "AIRFLOW__",
    "AIRFLOW_CONN_",
    "AIRFLOW_VAR_",
    "AIRFLOW_CONFIG",
    "KAFKA2PC_ORDERS_",
)


def forget_outside_settings() -> None:
    for name in [n for n in os.environ if n.startswith(OUTSIDE_SETTINGS)]:
        del os.environ[name]


def ensure_topic(protocol: KafkaProtocol) -> None:
    try:
        protocol.create_topic(TOPIC, TOPIC_PARTITIONS)
    except ProtocolError as exc:
        if exc.error_name != "TOPIC_ALREADY_EXISTS":
            raise


class Redirected:
    """Send this process's stdout/stderr (file descriptors, so child processes and
    Airflow's task logs too) to a file while the DAG runs: the demo's output stays short."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> Redirected:
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = (os.dup(1), os.dup(2))
        self._file = self.path.open("ab")
        os.dup2(self._file.fileno(), 1)
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self._saved[0], 1)
        os.dup2(self._saved[1], 2)
        for fd in self._saved:
            os.close(fd)
        self._file.close()


def load_example_dag() -> Any:
    """Migrate the metadata DB (idempotent), parse ``dags/`` and serialize it into the DB
    (``dag.test()`` of Airflow 3.1 refuses a DAG that is not): the example DAG."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.utils.db import upgradedb

    try:  # Airflow 3.2+
        from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag, sync_bag_to_db  # type: ignore[no-redef]

    upgradedb()
    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder=str(DAGS_FOLDER))
    if bag.import_errors:
        raise SystemExit(f"the example DAG does not import: {bag.import_errors}")
    sync_bag_to_db(bag, "dags-folder", None)
    return bag.dags[DAG_ID]


def run_interval(dag: Any, start: datetime) -> Any:
    """``dag.test()`` for the daily interval [start, start + 1 day); returns the DagRun."""
    end = start + timedelta(days=1)
    # A manual run's data interval is the period that ended at its logical date.
    dag_run = dag.test(logical_date=end)
    if (dag_run.data_interval_start, dag_run.data_interval_end) != (start, end):
        raise SystemExit(
            f"expected the interval {start}..{end}, the run had "
            f"{dag_run.data_interval_start}..{dag_run.data_interval_end}"
        )
    return dag_run


@dataclass
class Outcome:
    """What this invocation left, gathered while Airflow's logging still goes to the file."""

    run_id: str
    run_state: str
    tasks: dict[str, str | None]
    batch: Batch | None
    report: AuditReport
    seen: Visible


def gather(settings: dict[str, Any], protocol: KafkaProtocol, dag_run: Any) -> Outcome:
    """The run's task states, the ledger's batch for the interval, the audit, the consumer."""
    tasks = {ti.task_id.split(".")[-1]: _value(ti.state) for ti in dag_run.get_task_instances()}
    with Ledger(Ledger.default_url()) as ledger:  # the DAG's ledger: SQLite in AIRFLOW_HOME
        batch = ledger.get(EXPORT_ID, RUN_KEY)
        participants = ledger.participants(EXPORT_ID, RUN_KEY)
    report = audit_topic(protocol, TOPIC, [p.committable for p in participants], duplicates=True)
    return Outcome(
        dag_run.run_id, _value(dag_run.state), tasks, batch, report, read_committed(settings, TOPIC)
    )


def task_log_highlights(path: Path, offset: int) -> list[str]:
    """What our tasks logged during this invocation: ``task: message`` lines."""
    with path.open("rb") as log:
        log.seek(offset)
        text = log.read().decode(errors="replace")
    lines = []
    for match in _OUR_TASK_LINE.finditer(text):
        message, operator = match.group("message"), match.group("operator")
        if not message.startswith(_GENERIC):
            message = message.replace(f"{EXPORT_ID}/{RUN_KEY}", "the batch")
            lines.append(f"{_TASK_OF.get(operator, operator)}: {message}")
    return lines


_OUR_TASK_LINE = re.compile(
    r"^\S+ \[\w+\s*\] (?P<message>.*?) "
    r"\[airflow\.task\.\w+\.airflow_provider_kafka2pc\.[\w.]*\.(?P<operator>\w+)\]",
    re.MULTILINE,
)
_GENERIC = ("Success criteria met", "Branch into", "Following branch", "Skipping tasks")
_TASK_OF = {
    "KafkaDanglingTransactionSensor": "recover",
    "SparkKafkaPrepareOperator": "prepare",
    "KafkaTransactionDecisionOperator": "decide",
    "KafkaTransactionCommitOperator": "commit",
    "KafkaTransactionAbortOperator": "abort",
}


def _value(state: Any) -> str | None:
    return None if state is None else str(getattr(state, "value", state))


def main() -> int:
    started = time.monotonic()
    invoked_at = datetime.now(UTC)
    paths = demo_paths()
    if not (DAGS_FOLDER / f"{DAG_ID}.py").exists():
        print(f"{DAGS_FOLDER / DAG_ID}.py is missing: run the demo from a checkout (make demo)")
        return 2
    paths.root.mkdir(parents=True, exist_ok=True)
    first_time = not paths.airflow_home.exists()
    timings: dict[str, float] = {}
    with KafkaBroker(data_dir=paths.kafka) as broker:
        bootstrap = broker.bootstrap_servers
        settings = {"bootstrap.servers": bootstrap}
        timings["broker_s"] = time.monotonic() - started
        print(f"Apache Kafka {broker.version} (one KRaft node) at {bootstrap}; data {paths.kafka}")
        with KafkaProtocol(settings) as protocol:
            ensure_topic(protocol)
            before = audit_topic(protocol, TOPIC).totals["committed"]
            print(
                f"topic {TOPIC!r}: {before} committed records before this run\n"
                f"Airflow home {paths.airflow_home} ({'new' if first_time else 'kept'}): "
                "metadata DB and coordinator ledger (SQLite)"
            )
            forget_outside_settings()
            os.environ.update(airflow_environment(paths.airflow_home, bootstrap))
            print(
                f"running {DAG_ID} with dag.test() for the interval {INTERVAL_START:%Y-%m-%d} .. "
                f"{INTERVAL_END:%Y-%m-%d} (Airflow's output: {paths.dag_test_log}) ...",
                flush=True,
            )
            mark = time.monotonic()
            offset = paths.dag_test_log.stat().st_size if paths.dag_test_log.exists() else 0
            with Redirected(paths.dag_test_log):
                dag_run = run_interval(load_example_dag(), INTERVAL_START)
                timings["dag_run_s"] = time.monotonic() - mark
                outcome = gather(settings, protocol, dag_run)
                # Airflow's logging now reaches the terminal; the clients' closing chatter need not.
                logging.getLogger("kafka").setLevel(logging.WARNING)
    for line in task_log_highlights(paths.dag_test_log, offset):
        print(f"  {line}")
    return conclude(outcome, before, invoked_at, started, timings, paths.dag_test_log)


TASK_ORDER = ("recover", "prepare", "decide", "commit", "abort")


def conclude(
    outcome: Outcome,
    before: int,
    invoked_at: datetime,
    started: float,
    timings: dict[str, float],
    airflow_output: Path,
) -> int:
    batch, report, seen = outcome.batch, outcome.report, outcome.seen
    totals = report.totals
    duplicates = (report.duplicates or {}).get("extra_copies", 0)
    written = totals["committed"] - before
    committed_now = bool(batch and batch.finished_at and batch.finished_at >= invoked_at)
    source_rows = batch.source_rows if batch is not None else None
    print(
        f"dag run {outcome.run_id}: {outcome.run_state}; "
        + ", ".join(f"{t} {outcome.tasks.get(t)}" for t in TASK_ORDER)
    )
    print(f"coordinator ledger: {_describe_batch(batch)}")
    for view in report.committables:
        print(
            f"  participant {view['transactional_id']}: {view['expected']} records, "
            f"{view['state']} in the log"
        )
    print(
        f"log audit (markers applied by us): {json.dumps(totals)}; "
        f"duplicate keys among committed: {(report.duplicates or {}).get('duplicate_keys')}"
    )
    print(
        f"read_committed consumer (the broker's view): {seen.total} records, "
        f"{seen.duplicate_keys} duplicate keys, stalled partitions: {sorted(seen.stalled)}"
    )
    if committed_now:
        print(f"this invocation committed the interval: {written} records written")
    elif batch is not None and batch.state is BatchState.COMMITTED:
        print(
            f"written {written}: the ledger already had this interval COMMITTED "
            f"(at {batch.finished_at:%Y-%m-%d %H:%M:%S} UTC, attempt {batch.attempt}), so "
            "prepare skipped itself and everything after it: nothing was written"
        )
    checks = [
        ("the DAG run succeeded", outcome.run_state == "success"),
        (
            "the ledger has the interval COMMITTED",
            batch is not None and batch.state is BatchState.COMMITTED,
        ),
        ("the source had rows", bool(source_rows)),
        (
            f"the topic holds exactly the interval's {source_rows} orders, committed once each",
            totals["committed"] == source_rows and duplicates == 0,
        ),
        ("no transaction left open", totals["open"] == 0 and not seen.stalled),
        (
            "a read_committed consumer sees the same records, no key twice",
            seen.total == totals["committed"] and seen.duplicate_keys == 0,
        ),
        (
            "written = the interval's rows on the run that committed it, else 0",
            written == (source_rows if committed_now else 0),
        ),
    ]
    print()
    for text, ok in checks:
        print(f"  [{'ok' if ok else 'FAILED'}] {text}")
    proved = all(ok for _, ok in checks)
    print(
        "\nPROVED: exactly once, from the log markers and a read_committed consumer\n"
        if proved
        else f"\nNOT PROVED (what Airflow and the tasks said: {airflow_output})\n"
    )
    print(
        json.dumps(
            {
                "interval": RUN_KEY,
                "source_rows": source_rows,
                "written": written,
                "committed": totals["committed"],
                "aborted": totals["aborted"],
                "duplicates": duplicates,
                "open": totals["open"],
                "read_committed": seen.total,
                "ledger": batch.state.value if batch is not None else None,
                "tasks": {t: outcome.tasks.get(t) for t in TASK_ORDER},
                "exactly_once": proved,
                "seconds": round(time.monotonic() - started, 1),
                **{k: round(v, 1) for k, v in timings.items()},
            }
        )
    )
    return 0 if proved else 1


def _describe_batch(batch: Batch | None) -> str:
    if batch is None:
        return "no batch for this interval"
    return (
        f"{batch.state.value}, attempt {batch.attempt}, verdict "
        f"{batch.verdict.value if batch.verdict else None}, {batch.source_rows} source rows, "
        f"ids {list(batch.transactional_ids)}"
    )


if __name__ == "__main__":
    sys.exit(main())
