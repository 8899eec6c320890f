"""The export group end to end on the real broker and Spark local[2]: commits, and re-runs."""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path
from typing import Any, ClassVar

import pytest

from airflow_provider_kafka2pc import version_compat
from airflow_provider_kafka2pc.export import export_asset
from airflow_provider_kafka2pc.ledger import BatchState, ParticipantState, Verdict
from airflow_provider_kafka2pc.operators.prepare import SparkKafkaPrepareOperator
from airflow_provider_kafka2pc.spark.class_sharing import runs_until_mapped
from airflow_provider_kafka2pc.spark.compilation import THRESHOLDS
from airflow_provider_kafka2pc.spark.job import spark_submit_binary
from airflow_provider_kafka2pc.version_compat import HAS_TASK_STATE_STORE
from tests.airflow import dagtest
from tests.conftest import assert_exactly_once

ROWS = 300


class SpyPrepare(SparkKafkaPrepareOperator):
    """Notes what the spark-submit command is built from, at the moment it is built."""

    seen: ClassVar[dict[str, Any]] = {}

    def spark_hook(self, job, kafka=None):
        hook = super().spark_hook(job, kafka)
        build = hook.submit_hook

        def spy(args, conf):  # SparkJobHook builds Spark's hook right before submitting
            path = Path(args[args.index("--kafka-config-file") + 1])
            spec = Path(args[args.index("--spec-file") + 1])
            SpyPrepare.seen.update(
                args=list(args),
                spec=json.loads(spec.read_text()),
                spec_mode=stat.S_IMODE(spec.stat().st_mode),
                conf=dict(job.conf_dict()),
                path=path,
                mode=stat.S_IMODE(path.stat().st_mode),
                settings=json.loads(path.read_text()),
                submitted=dict(conf),
            )
            return build(args, conf)

        hook.submit_hook = spy
        return hook


@pytest.mark.parametrize("writer", ["python", "jvm"])
def test_happy_path_commits_exactly_once_without_leaking_secrets(
    export_dag,
    run_export,
    make_topic,
    protocol,
    bootstrap,
    settings,
    ledger,
    monkeypatch,
    capfd,
    writer,
):
    # A SASL password on a PLAINTEXT listener: the clients ignore it, we must not leak it.
    secret = f"s3cret-{uuid.uuid4().hex}"
    extra = {**settings, "sasl.username": "kafka2pc-user", "sasl.password": secret}
    for key, value in dagtest.kafka_connection_env(extra).items():
        monkeypatch.setenv(key, value)
    # Whatever ran before in this process: the missing task state store is logged again.
    monkeypatch.setattr(version_compat, "_logged", set())
    topic = make_topic(3)
    dag = export_dag(
        topic=topic,
        rows=ROWS,
        operator_classes={"prepare": SpyPrepare},
        prepare_kwargs={"writer": writer},
    )

    archive_before = runs_until_mapped({}, spark_submit_binary())
    result = run_export(dag, day=1)

    assert result.state == "success", result
    assert result.tasks == {
        "recover": "success",
        "prepare": "success",
        "decide": "success",
        "commit": "success",
        "abort": "skipped",
    }
    prepared = result.xcom("prepare")
    assert prepared["records"] == prepared["source_rows"] == ROWS
    assert [p["partition"] for p in prepared["participants"]] == [0, 1]
    export_id, run_key = prepared["export_id"], prepared["run_key"]
    with ledger.open() as store:
        batch = store.get(export_id, run_key)
        parts = store.participants(export_id, run_key)
        leases = store.leases(batch.id_prefix)
    assert batch.state is BatchState.COMMITTED and batch.verdict is Verdict.COMMIT
    assert [p.state for p in parts] == [ParticipantState.COMMITTED] * 2
    assert leases and not any(lease.leased for lease in leases)
    committables = [p.committable for p in parts]
    assert_exactly_once(protocol, bootstrap, topic, *committables, committed=ROWS, aborted=0)

    # The verdict: ledger first, then the task state store (Airflow 3.3+) and XCom.
    verdict = result.xcom("decide", key="verdict")
    assert verdict["verdict"] == "COMMIT" and verdict["run_key"] == run_key
    if HAS_TASK_STATE_STORE:
        assert result.task_state_store("decide", "verdict") == verdict
    # One asset event, from the commit, carrying the run key and the committed count.
    assert dagtest.asset_events(export_asset(topic).uri) == [
        {"export_id": export_id, "run_key": run_key, "committed": ROWS}
    ]

    # The secret reached the Spark job only through a private file, now removed.
    seen = SpyPrepare.seen
    # The export's options in one file, the spec the ledger records.
    assert seen["spec"]["writer"] == writer and seen["spec_mode"] == 0o600
    assert seen["spec"] == batch.spark_job["export"]
    assert seen["settings"]["sasl.password"] == secret
    assert seen["mode"] == 0o600 and not seen["path"].exists()
    assert secret not in json.dumps([seen["args"], seen["conf"]])
    assert secret not in json.dumps([seen["spec"], batch.spark_job])
    # The driver JVM maps the class-data-sharing archive once one is written (another test
    # worker may write it meanwhile: the state only moves forward).
    driver_options = seen["submitted"].get("spark.driver.extraJavaOptions", "")
    if archive_before == 0:
        assert "-XX:SharedArchiveFile=" in driver_options
    elif archive_before == 1:
        assert "ArchiveClassesAtExit=" in driver_options or "SharedArchiveFile=" in driver_options
    # ... and compiles with C2's raised thresholds (spark/compilation.py).
    assert all(threshold in driver_options.split() for threshold in THRESHOLDS), driver_options
    # ... and nowhere in XCom, the task logs, or Airflow's metadata DB.
    xcoms = [result.xcom(t) for t in ("prepare", "commit")] + [verdict]
    assert secret not in json.dumps(xcoms)
    out, err = capfd.readouterr()
    assert "Spark-Submit cmd" in out + err  # the task logs were captured
    # An older Airflow says, in the decision's log, that the verdict went to XCom only.
    degraded = "has no task state store: the recorded verdict is published to XCom only"
    assert (degraded in out + err) is not HAS_TASK_STATE_STORE
    assert secret not in out + err
    assert secret.encode() not in (Path(os.environ["AIRFLOW_HOME"]) / "airflow.db").read_bytes()


def test_rerun_of_committed_interval_writes_nothing_and_skips_downstream(
    export_dag, run_export, make_topic, protocol, bootstrap, ledger
):
    topic = make_topic(2)
    dag = export_dag(topic=topic, rows=ROWS)
    first = run_export(dag, day=2)
    assert first.state == "success", first
    prepared = first.xcom("prepare")

    again = run_export(dag, day=2)  # dag.test clears the run's tasks and runs them again

    assert again.state == "success", again
    assert again.tasks == {
        "recover": "success",
        "prepare": "skipped",
        "decide": "skipped",
        "commit": "skipped",
        "abort": "skipped",
    }
    with ledger.open() as store:
        batch = store.get(prepared["export_id"], prepared["run_key"])
    assert batch.state is BatchState.COMMITTED and batch.attempt == 1
    assert_exactly_once(protocol, bootstrap, topic, committed=ROWS, aborted=0)
    assert len(dagtest.asset_events(export_asset(topic).uri)) == 1
