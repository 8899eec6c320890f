"""One export into several topics under dag.test(): spark-submit with each writer, the
ledger, one asset event per topic, and both witnesses on every topic; an aborted run leaves
nothing visible in any topic and emits no event."""

from __future__ import annotations

import pytest

from airflow_provider_kafka2pc.errors import ConfigurationError
from airflow_provider_kafka2pc.export import export_asset
from airflow_provider_kafka2pc.ledger import BatchState
from tests.airflow import dagtest
from tests.conftest import assert_exactly_once

ROWS = 300


def routed_source(topics: list[str]) -> dict[str, str]:
    """Order ``id`` goes to ``topics[id % len(topics)]`` (column ``kind``)."""
    names = ", ".join(f"'{t}'" for t in topics)
    return {
        "sql": (
            "SELECT id AS order_id, CAST(id % 1000 AS DOUBLE) / 4 AS amount, "
            f"element_at(array({names}), CAST(id % {len(topics)} + 1 AS INT)) AS kind "
            f"FROM range(0, {ROWS})"
        )
    }


def per_topic(topics: list[str]) -> dict[str, int]:
    return {t: len(range(i, ROWS, len(topics))) for i, t in enumerate(topics)}


@pytest.mark.parametrize("writer", ["python", "jvm"])
def test_one_export_commits_every_topic_once(
    export_dag, run_export, make_topic, protocol, bootstrap, ledger, writer
):
    topics = [make_topic(2), make_topic(3)]
    dag = export_dag(
        topic=None,
        topic_column="kind",
        topics=topics,
        source=routed_source(topics),
        writer=writer,
    )
    commit = dag.get_task("export.commit")
    # One alias per topic, declared without reading the connection.
    assert [o.name.rsplit(":", 1)[1] for o in commit.outlets] == topics

    result = run_export(dag, day=1)

    assert result.state == "success", result
    prepared = result.xcom("prepare")
    assert prepared["records"] == prepared["source_rows"] == ROWS
    assert prepared["topics"] == topics
    export_id, run_key = prepared["export_id"], prepared["run_key"]
    with ledger.open() as store:
        batch = store.get(export_id, run_key)
        committables = [p.committable for p in store.participants(export_id, run_key)]
    assert batch.state is BatchState.COMMITTED and batch.topics == tuple(topics)
    for topic, rows in per_topic(topics).items():
        assert_exactly_once(protocol, bootstrap, topic, *committables, committed=rows, aborted=0)
        # One event per topic's asset, with the records committed to that topic.
        assert dagtest.asset_events(export_asset(topic).uri) == [
            {"export_id": export_id, "run_key": run_key, "committed": rows}
        ]


def test_an_aborted_export_leaves_nothing_in_any_topic(
    export_dag, run_export, make_topic, protocol, bootstrap, ledger
):
    topics = [make_topic(2), make_topic(2)]
    # A commit margin beyond the transaction timeout: the decision is ABORT.
    dag = export_dag(
        topic=None,
        topic_column="kind",
        topics=topics,
        source=routed_source(topics),
        commit_margin_s=100_000,
    )
    result = run_export(dag, day=1)
    assert result.tasks["abort"] == "failed" and result.tasks["commit"] == "skipped", result
    prepared = result.xcom("prepare")
    with ledger.open() as store:
        assert store.get(prepared["export_id"], prepared["run_key"]).state is BatchState.ABORTED
    for topic, rows in per_topic(topics).items():
        assert_exactly_once(protocol, bootstrap, topic, committed=0, aborted=rows)
        assert dagtest.asset_events(export_asset(topic).uri) == []


def test_routing_is_checked_when_the_dag_is_parsed(export_dag):
    with pytest.raises(ConfigurationError, match="exactly one of topic"):
        export_dag(topic="orders", topic_column="kind", topics=["orders"])
    with pytest.raises(ConfigurationError, match="needs topics"):
        export_dag(topic=None, topic_column="kind")


@pytest.mark.parametrize("way", ["source", "log"])
def test_a_loss_across_topics_is_repaired_exactly_once_per_topic(
    way, export_dag, run_export, make_topic, protocol, bootstrap, ledger
):
    """Flink's scenario (tests/airflow/test_loss_repair.py) with rows routed among two
    topics: participants 1 and 2 time out after the COMMIT verdict; the commit re-prepares
    them from the source (``source``) or copies their aborted records from the log, each
    transaction spanning both topics (``log``), and every topic ends with its rows once."""
    from tests.airflow.test_loss_repair import EXPORT_TIMEOUT_MS, CommitRetriedAfterTheTimeout

    class Commit(CommitRetriedAfterTheTimeout):
        def __init__(self, **kwargs):
            super(CommitRetriedAfterTheTimeout, self).__init__(
                repair_from_log=way == "log", **kwargs
            )

    topics = [make_topic(3), make_topic(3)]
    dag = export_dag(
        topic=None,
        topic_column="kind",
        topics=topics,
        source=routed_source(topics),
        num_partitions=3,
        retries=1,
        transaction_timeout_ms=EXPORT_TIMEOUT_MS,
        commit_margin_s=1.0,
        operator_classes={"commit": Commit},
    )
    result = run_export(dag, day=7 if way == "source" else 8)

    assert result.state == "success", result
    assert result.tries["commit"] == 2, result
    prepared = CommitRetriedAfterTheTimeout.seen["prepared"]
    committed = result.xcom("commit")
    assert [r["partition"] for r in committed["repaired"]] == [1, 2], committed
    assert {r["from"] for r in committed["repaired"]} == {way}, committed
    with ledger.open() as store:
        parts = store.participants(committed["export_id"], committed["run_key"])
    assert all({r.topic for r in p.committable.partitions} == set(topics) for p in parts)
    lost = [r for c in prepared[1:] for r in c.partitions]
    for topic, rows in per_topic(topics).items():
        assert_exactly_once(
            protocol,
            bootstrap,
            topic,
            *prepared,
            *[p.committable for p in parts[1:]],
            committed=rows,
            aborted=sum(r.record_count for r in lost if r.topic == topic),
        )


def test_the_exports_page_names_every_topic(tmp_path):
    """The page's export header lists the topics of its batches (a real SQLite ledger)."""
    from datetime import UTC, datetime, timedelta

    from airflow_provider_kafka2pc.ledger import Ledger
    from airflow_provider_kafka2pc.plugins.overview import BatchRow, ExportView, Overview
    from airflow_provider_kafka2pc.plugins.page import _templates

    with Ledger(f"sqlite:///{tmp_path / 'ledger.db'}") as store:
        several = store.begin(
            "shop.export", "r1", topic="orders", topics=["orders", "refunds"],
            id_prefix="shop", num_partitions=1,
        )  # fmt: skip
        one = store.begin("solo.export", "r1", topic="solo", id_prefix="solo", num_partitions=1)
        view = ExportView("shop.export", "shop", [BatchRow(several, (), None)], [], 1)
        alone = ExportView("solo.export", "solo", [BatchRow(one, (), None)], [], 1)
    html = _templates.get_template("kafka_exports.html").render(
        o=Overview("sqlite", "kafka_default", datetime.now(UTC), [view, alone]),
        user="admin",
        grace_period=timedelta(hours=1),
        recover_url="/recover",
        page_url="/page",
        recovered=None,
    )
    text = " ".join(html.split())
    assert "topics orders, refunds &middot;" in text and "topic solo &middot;" in text
