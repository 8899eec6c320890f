"""OpenLineage from real exports under dag.test(): the OpenLineage provider's listener with
its file transport, in child processes (the provider reads its configuration once per
process, and the session's other tests run without it).

A committed export reports its input (the source file, with its rows) and its output (the
topic as ``kafka://<bootstrap server>`` / topic, with the records committed), from the
commit task. An aborted export reports no output in any event.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka2pc.ledger import BatchState
from tests.airflow import dagtest
from tests.conftest import assert_exactly_once

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
ROWS = 120


def orders_file(path: Path) -> Path:
    path.write_text(
        "".join(json.dumps({"order_id": i, "amount": i * 2.5}) + "\n" for i in range(ROWS))
    )
    return path


def run_child(tmp_path: Path, name: str, spec: dict[str, Any]) -> subprocess.Popen:
    events = tmp_path / f"{name}.openlineage.jsonl"
    env = os.environ.copy()  # the connections, from the fixtures
    env["AIRFLOW__OPENLINEAGE__TRANSPORT"] = json.dumps(
        {"type": "file", "log_file_path": str(events), "append": True}
    )
    env["AIRFLOW__OPENLINEAGE__NAMESPACE"] = "kafka2pc-tests"
    spec = {"home": str(tmp_path / f"airflow-{name}"), **spec}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.airflow.dagtest", json.dumps(spec)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(child: subprocess.Popen) -> dict[str, Any]:
    out = child.communicate(timeout=500)[0]
    result = dagtest.result_in(out)
    assert child.returncode == 0 and result is not None, out[-3000:]
    return result


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def task_events(all_events: list[dict[str, Any]], dag_id: str, task: str) -> list[dict[str, Any]]:
    job = f"{dag_id}.{dagtest.GROUP_ID}.{task}"
    return [e for e in all_events if e["job"]["name"] == job]


def datasets(event: dict[str, Any], kind: str) -> list[tuple[str, str, Any]]:
    """(namespace, name, rowCount) of the event's inputs or outputs."""
    facet = "inputStatistics" if kind == "inputs" else "outputStatistics"
    facets = "inputFacets" if kind == "inputs" else "outputFacets"
    return [
        (d["namespace"], d["name"], d.get(facets, {}).get(facet, {}).get("rowCount"))
        for d in event.get(kind, [])
    ]


def test_committed_export_reports_input_and_topic_aborted_export_no_output(
    export_env, make_topic, settings, tmp_path, protocol, bootstrap
):
    topic = make_topic(2)
    source = {"path": str(orders_file(tmp_path / "orders.json")), "format": "json"}
    common = {"topic": topic, "source": source, "num_partitions": 2}
    committed = run_child(tmp_path, "committed", {"dag_id": "ol_committed", "day": 1, **common})
    # A commit margin beyond the transaction timeout: the decision is ABORT.
    aborted = run_child(
        tmp_path,
        "aborted",
        {"dag_id": "ol_aborted", "day": 2, "commit_margin_s": 100_000, **common},
    )
    results = {"committed": finish(committed), "aborted": finish(aborted)}

    assert results["committed"]["state"] == "success", results
    assert results["aborted"]["state"] == "failed", results
    assert results["aborted"]["tasks"]["abort"] == "failed", results
    with export_env.open() as store:
        for name, result in results.items():
            batch = store.get(
                f"{result['dag_id']}.{dagtest.GROUP_ID}", result["prepared"]["run_key"]
            )
            wanted = BatchState.COMMITTED if name == "committed" else BatchState.ABORTED
            assert batch.state is wanted, batch

    kafka = (f"kafka://{settings['bootstrap.servers'].split(',')[0]}", topic, ROWS)
    source_in = ("file", source["path"], ROWS)
    ok = events(tmp_path / "committed.openlineage.jsonl")
    (commit,) = [
        e for e in task_events(ok, "ol_committed", "commit") if e["eventType"] == "COMPLETE"
    ]
    assert datasets(commit, "outputs") == [kafka], commit
    assert datasets(commit, "inputs") == [source_in], commit
    (prepare,) = [
        e for e in task_events(ok, "ol_committed", "prepare") if e["eventType"] == "COMPLETE"
    ]
    assert datasets(prepare, "inputs") == [source_in] and datasets(prepare, "outputs") == []
    # The topic is an output of the commit only, and only once.
    outputs = [(e["job"]["name"], e["eventType"], d) for e in ok for d in datasets(e, "outputs")]
    assert outputs == [("ol_committed.export.commit", "COMPLETE", kafka)], outputs

    failed = events(tmp_path / "aborted.openlineage.jsonl")
    assert task_events(failed, "ol_aborted", "abort"), [e["job"]["name"] for e in failed]
    assert [d for e in failed for d in datasets(e, "outputs")] == [], failed
    (prepare,) = [
        e for e in task_events(failed, "ol_aborted", "prepare") if e["eventType"] == "COMPLETE"
    ]
    assert datasets(prepare, "inputs") == [source_in]  # it read the source all the same
    # Both witnesses: the committed run's rows once, the aborted run's invisible.
    assert_exactly_once(protocol, bootstrap, topic, committed=ROWS, aborted=ROWS)


def test_an_export_into_several_topics_reports_one_output_per_topic(
    export_env, make_topic, settings, tmp_path, protocol, bootstrap
):
    topics = [make_topic(2), make_topic(2)]
    path = tmp_path / "routed.json"
    path.write_text(
        "".join(
            json.dumps({"order_id": i, "amount": i * 2.5, "kind": topics[i % 2]}) + "\n"
            for i in range(ROWS)
        )
    )
    source = {"path": str(path), "format": "json"}
    spec = {"topic": None, "topic_column": "kind", "topics": topics, "source": source}
    result = finish(run_child(tmp_path, "multi", {"dag_id": "ol_multi", "day": 1, **spec}))
    assert result["state"] == "success", result

    server = f"kafka://{settings['bootstrap.servers'].split(',')[0]}"
    ok = events(tmp_path / "multi.openlineage.jsonl")
    (commit,) = [e for e in task_events(ok, "ol_multi", "commit") if e["eventType"] == "COMPLETE"]
    assert datasets(commit, "outputs") == [(server, t, ROWS // 2) for t in topics], commit
    assert datasets(commit, "inputs") == [("file", source["path"], ROWS)], commit
    # The topics are outputs of the commit only.
    outputs = [(e["job"]["name"], d[1]) for e in ok for d in datasets(e, "outputs")]
    assert outputs == [("ol_multi.export.commit", t) for t in topics], outputs
    for topic in topics:
        assert_exactly_once(protocol, bootstrap, topic, committed=ROWS // 2, aborted=0)
