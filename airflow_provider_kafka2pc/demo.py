"""``make demo``: export runs as two-phase commits on the embedded default, proved from the log.

The prepare phase is the packaged spark-submit application on Spark ``local[2]``: every
Spark partition writes its rows into its own Kafka transaction and the application
exits, leaving them open. A decision is taken from the manifest (every participant
prepared its full share, is still open, far from its timeout); a different process
commits. Then the faults that matter: a repeated commit, and a second run in which one
participant is fenced before the decision (verdict ABORT). Every count comes from the
log's commit/abort markers, applied by our audit.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .broker import KafkaBroker
from .spark.submit import submit_prepare
from .transaction.audit import audit_topic
from .transaction.batch import PreparedBatch
from .transaction.protocol import KafkaProtocol
from .transaction.visible import read_committed

TOPIC = "exports"
ROWS = 20_000
PARTICIPANTS = 4
#: A verdict of COMMIT needs this much time left before the transaction timeout.
SAFETY_MARGIN_MS = 60_000


def kafka2pc(*args: str) -> tuple[int, Any]:
    """The CLI in its own process, as a commit task would run it."""
    done = subprocess.run(
        [sys.executable, "-m", "airflow_provider_kafka2pc.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else done.stderr


def write_source(path: Path, start: int) -> Path:
    ids = range(start, start + ROWS)
    pq.write_table(
        pa.table(
            {
                "id": list(ids),
                "customer": [f"customer-{i % 977}" for i in ids],
                "amount": [round(i * 1.25, 2) for i in ids],
            }
        ),
        path,
    )
    return path


def prepare(bootstrap: str, workdir: Path, run: str, start: int) -> PreparedBatch:
    manifest = workdir / f"{run}.manifest.json"
    done = submit_prepare(
        [
            "--source-path",
            str(write_source(workdir / f"{run}.parquet", start)),
            "--topic",
            TOPIC,
            "--key-column",
            "id",
            "--bootstrap-servers",
            bootstrap,
            "--transactional-ids",
            ",".join(f"demo-{run}-{i}" for i in range(PARTICIPANTS)),
            "--run-id",
            run,
            "--manifest",
            str(manifest),
        ],
        log_path=workdir / f"{run}.spark.log",
    )
    if done.returncode != 0:
        raise SystemExit(f"spark-submit failed; see {workdir / f'{run}.spark.log'}")
    return PreparedBatch.from_json(manifest.read_text())


def decide(batch: PreparedBatch, protocol: KafkaProtocol) -> str:
    """COMMIT only if every participant prepared its full share and is still open."""
    views = audit_topic(protocol, TOPIC, batch.committables).committables
    now_ms = int(time.time() * 1000)
    ready = batch.source_rows == ROWS and all(
        view["state"] == "OPEN"
        and view["complete"]
        and c.record_count == rows
        and c.deadline_ms - now_ms > SAFETY_MARGIN_MS
        for c, view, rows in zip(batch.committables, views, batch.partition_rows, strict=True)
    )
    return "COMMIT" if ready else "ABORT"


def finish(bootstrap: str, verdict: str, manifest: Path) -> list[str]:
    _, out = kafka2pc(verdict.lower(), "-b", bootstrap, str(manifest))
    return [r["outcome"] for r in out["results"]]


def main() -> int:
    checks: list[tuple[str, bool]] = []
    with tempfile.TemporaryDirectory() as tmp, KafkaBroker() as broker:
        bootstrap, workdir = broker.bootstrap_servers, Path(tmp)
        kafka2pc("topic", "create", "-b", bootstrap, "-t", TOPIC, "--partitions", "6")
        print(
            f"Apache Kafka {broker.version} (one KRaft node) at {bootstrap}; "
            f"topic {TOPIC!r} with 6 partitions"
        )
        with KafkaProtocol({"bootstrap.servers": bootstrap}) as protocol:
            run1 = prepare(bootstrap, workdir, "run1", 0)
            print(
                f"run1: spark-submit (local[2]) prepared {run1.source_rows} rows in "
                f"{len(run1.committables)} transactions {list(run1.partition_rows)}; "
                "the application has exited"
            )
            verdict = decide(run1, protocol)
            outcomes = finish(bootstrap, verdict, workdir / "run1.manifest.json")
            print(f"run1: verdict {verdict}; commit from another process: {outcomes}")
            checks.append(
                (
                    "run1 verdict COMMIT, every participant COMMITTED",
                    verdict == "COMMIT" and set(outcomes) == {"COMMITTED"},
                )
            )
            again = finish(bootstrap, "COMMIT", workdir / "run1.manifest.json")
            print(f"run1: commit repeated: {again}")
            checks.append(
                (
                    "repeated commit answers ALREADY_COMMITTED, writes nothing",
                    set(again) == {"ALREADY_COMMITTED"},
                )
            )

            run2 = prepare(bootstrap, workdir, "run2", ROWS)
            fenced = run2.committables[1].transactional_id
            kafka2pc("fence", "-b", bootstrap, "--transactional-id", fenced)
            verdict2 = decide(run2, protocol)
            outcomes2 = finish(bootstrap, verdict2, workdir / "run2.manifest.json")
            print(
                f"run2: {fenced} fenced after prepare (as a timeout would); "
                f"verdict {verdict2}; abort: {outcomes2}"
            )
            checks.append(
                (
                    "run2 verdict ABORT, all of it aborted",
                    verdict2 == "ABORT" and set(outcomes2) <= {"ABORTED", "ALREADY_ABORTED"},
                )
            )

            report = audit_topic(
                protocol, TOPIC, run1.committables + run2.committables, duplicates=True
            )
        totals, dupes = report.totals, report.duplicates or {}
        print(
            f"log audit (markers applied by us): {json.dumps(totals)}; "
            f"duplicate keys among committed: {dupes.get('duplicate_keys')}"
        )
        seen = read_committed({"bootstrap.servers": bootstrap}, TOPIC)
        print(
            f"read_committed consumer (the broker's view): {seen.total} records, "
            f"{seen.duplicate_keys} duplicate keys, stalled partitions: {sorted(seen.stalled)}"
        )
        checks += [
            (
                f"a read_committed consumer sees exactly the {ROWS} committed rows, "
                "none of the aborted ones",
                seen.total == ROWS and seen.duplicate_keys == 0 and not seen.stalled,
            ),
            (
                f"exactly {ROWS} records committed (run1), each once",
                totals["committed"] == ROWS
                and dupes.get("extra_copies") == 0
                and dupes.get("committed_keys") == ROWS,
            ),
            (f"all {ROWS} records of run2 aborted", totals["aborted"] == ROWS),
            ("no transaction left open", totals["open"] == 0),
        ]
    print()
    for text, ok in checks:
        print(f"  [{'ok' if ok else 'FAILED'}] {text}")
    proved = all(ok for _, ok in checks)
    print(
        "\nPROVED: exactly once, from the log markers and a read_committed consumer"
        if proved
        else "\nNOT PROVED"
    )
    return 0 if proved else 1


if __name__ == "__main__":
    sys.exit(main())
