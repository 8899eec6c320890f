"""``make demo``: one export run as a two-phase commit on the embedded broker, proved from the log.

Every phase runs in its own process, as it will under Airflow: participants prepare
and exit, a decision is taken from their committables, a different process commits,
and the log's transaction markers are counted. Then the two faults that matter: a
repeated commit, and a participant fenced before the verdict (the run aborts).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .broker import EmbeddedBroker
from .transaction.audit import audit_topic
from .transaction.committable import Committable
from .transaction.protocol import KafkaProtocol

TOPIC = "exports"
ROWS = 20_000
PARTICIPANTS = 4


def kafka2pc(*args: str, stdin: str | None = None) -> tuple[int, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "airflow_provider_kafka2pc.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else done.stderr


def prepare_run(bootstrap: str, workdir: Path, run: str, start: int) -> list[Committable]:
    """Each participant writes its share in its own process, which then exits."""
    committables = []
    for index in range(PARTICIPANTS):
        share = workdir / f"{run}-{index}.jsonl"
        rows = range(start + index, start + ROWS, PARTICIPANTS)
        share.write_text("".join(json.dumps({"id": i, "amount": i % 97}) + "\n" for i in rows))
        code, out = kafka2pc(
            "prepare",
            "-b",
            bootstrap,
            "-t",
            TOPIC,
            "--transactional-id",
            f"demo-{run}-{index}",
            "--input",
            str(share),
            "--key-field",
            "id",
        )
        if code != 0:
            raise SystemExit(f"prepare failed: {out}")
        committables.append(Committable.from_dict(out))
    return committables


def decide(committables: list[Committable], protocol: KafkaProtocol) -> str:
    """COMMIT only if every participant prepared its full share and is still open."""
    views = audit_topic(protocol, TOPIC, committables).committables
    now_ms = int(time.time() * 1000)
    ready = all(
        v["state"] == "OPEN"
        and v["complete"]
        and c.record_count == ROWS // PARTICIPANTS
        and c.deadline_ms - now_ms > 60_000
        for c, v in zip(committables, views, strict=True)
    )
    return "COMMIT" if ready else "ABORT"


def finish(bootstrap: str, verdict: str, committables: list[Committable]) -> list[str]:
    payload = json.dumps([c.to_dict() for c in committables])
    _, out = kafka2pc(verdict.lower(), "-b", bootstrap, "-", stdin=payload)
    return [r["outcome"] for r in out["results"]]


def main() -> int:
    checks: list[tuple[str, bool]] = []
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        bootstrap, workdir = broker.bootstrap_servers, Path(tmp)
        kafka2pc("topic", "create", "-b", bootstrap, "-t", TOPIC, "--partitions", "6")
        print(f"embedded broker at {bootstrap}; topic {TOPIC!r}, 6 partitions")
        with KafkaProtocol({"bootstrap.servers": bootstrap}) as protocol:
            # Run 1: every participant prepares, the verdict is COMMIT.
            run1 = prepare_run(bootstrap, workdir, "run1", 0)
            verdict = decide(run1, protocol)
            outcomes = finish(bootstrap, verdict, run1)
            print(
                f"run1: {PARTICIPANTS} participants prepared {ROWS} rows; verdict {verdict}; "
                f"commit from another process: {outcomes}"
            )
            checks.append(
                (
                    "run1 verdict COMMIT, every participant COMMITTED",
                    verdict == "COMMIT" and set(outcomes) == {"COMMITTED"},
                )
            )
            again = finish(bootstrap, "COMMIT", run1)
            checks.append(
                ("repeated commit answers ALREADY_COMMITTED", set(again) == {"ALREADY_COMMITTED"})
            )

            # Run 2: one participant is fenced after preparing (as a timeout would);
            # the decision sees it and the whole run aborts.
            run2 = prepare_run(bootstrap, workdir, "run2", ROWS)
            kafka2pc("fence", "-b", bootstrap, "--transactional-id", run2[1].transactional_id)
            verdict2 = decide(run2, protocol)
            outcomes2 = finish(bootstrap, verdict2, run2)
            print(
                f"run2: participant 1 fenced before the decision; verdict {verdict2}; "
                f"abort: {outcomes2}"
            )
            checks.append(
                (
                    "run2 verdict ABORT, nothing of it visible",
                    verdict2 == "ABORT" and set(outcomes2) <= {"ABORTED", "ALREADY_ABORTED"},
                )
            )

            report = audit_topic(protocol, TOPIC, run1 + run2, duplicates=True)
        totals, dupes = report.totals, report.duplicates or {}
        print(
            f"log audit (markers applied by us): {json.dumps(totals)}; "
            f"duplicate keys among committed: {dupes.get('duplicate_keys')}"
        )
        checks += [
            (
                f"exactly {ROWS} records committed (run1), once each",
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
    print("\nPROVED: exactly once, from the log markers" if proved else "\nNOT PROVED")
    return 0 if proved else 1


if __name__ == "__main__":
    sys.exit(main())
