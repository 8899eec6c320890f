"""Bad input: a clear error before any transaction opens, nothing half-written anywhere."""

from __future__ import annotations

import re

import pytest

from airflow_provider_kafka2pc.errors import ConfigurationError
from airflow_provider_kafka2pc.export import (
    default_id_prefix,
    export_asset,
    kafka_exactly_once_export,
)
from airflow_provider_kafka2pc.operators.prepare import SparkKafkaPrepareOperator
from tests.airflow import dagtest
from tests.conftest import assert_exactly_once

OTHER_EXPORT = "someone.elses_export"


def _missing(monkeypatch, conn_id):
    monkeypatch.delenv(f"AIRFLOW_CONN_{conn_id.upper()}")


CASES = {
    "kafka connection": (
        lambda mp, tmp: _missing(mp, dagtest.KAFKA_CONN_ID),
        {},
        "Kafka connection 'kafka_default' is not defined",
    ),
    "spark connection": (
        lambda mp, tmp: _missing(mp, dagtest.SPARK_CONN_ID),
        {},
        "Spark connection 'spark_default' is not defined",
    ),
    "ledger connection": (
        lambda mp, tmp: _missing(mp, dagtest.LEDGER_CONN_ID),
        {},
        "ledger connection 'kafka2pc_ledger' is not defined",
    ),
    "unknown topic": (
        None,
        {"topic": "no-such-topic"},
        "topic 'no-such-topic' is not usable through Kafka connection 'kafka_default': "
        "UNKNOWN_TOPIC_OR_PARTITION; create it first",
    ),
    "unknown source path": (
        None,
        {"source": {"path": "/nonexistent/kafka2pc/orders.parquet"}},
        "source path '/nonexistent/kafka2pc/orders.parquet' does not exist",
    ),
    "registry connection": (
        None,
        {"value_format": {}, "registry_conn_id": "no_such_registry"},
        "schema registry connection 'no_such_registry' is not defined",
    ),
    "registry format without a registry": (
        None,
        {"value_format": {}},
        "value_format/key_format need registry_conn_id",
    ),
    # Met first by the recover task (it searches the prefix), else by prepare's lease.
    "prefix of another export": (
        None,
        {"id_prefix": "shared-prefix"},
        re.compile(
            rf"id_prefix 'shared-prefix' (belongs to export '{OTHER_EXPORT}'"
            rf"|is in use by export\(s\) \['{OTHER_EXPORT}'\])"
        ),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_fails_clearly_before_any_transaction_opens(
    case,
    export_dag,
    run_export,
    make_topic,
    protocol,
    bootstrap,
    ledger,
    monkeypatch,
    tmp_path,
    capfd,
):
    breaks, options, message = CASES[case]
    topic = make_topic(2)
    options = {"topic": topic, "retries": 1, **options}
    if case == "prefix of another export":
        with ledger.open() as store:
            store.begin(OTHER_EXPORT, "k", topic=topic, id_prefix="shared-prefix", num_partitions=1)
    dag = export_dag(**options)
    asset_uri = export_asset(options["topic"]).uri  # while the Kafka connection exists
    if breaks:
        breaks(monkeypatch, tmp_path)

    result = run_export(dag, day=9)

    assert result.state == "failed", result
    # The first task to meet the bad input fails, without retrying (retries=1).
    assert result.tasks["prepare"] in ("failed", "upstream_failed")
    assert max(result.tries.values()) == 1, result.tries
    assert result.tasks["commit"] in ("skipped", "upstream_failed")
    assert result.tasks["abort"] in ("failed", "upstream_failed")
    out, err = capfd.readouterr()
    if isinstance(message, re.Pattern):
        assert message.search(out + err), message.pattern
    else:
        assert message in out + err
    export_id = f"{dag.dag_id}.{dagtest.GROUP_ID}"
    prefix = options.get("id_prefix") or default_id_prefix(export_id)
    if ledger.path.exists():
        with ledger.open() as store:
            assert store.in_doubt(export_id) == []
            assert [b.export_id for b in store.in_doubt()] == (
                [OTHER_EXPORT] if case == "prefix of another export" else []
            )
            assert all(lease.export_id != export_id for lease in store.leases())
            if case != "prefix of another export":
                assert store.leases(prefix) == []
    else:
        assert case == "ledger connection"
    assert protocol.list_transactions(prefix=prefix) == []
    assert dagtest.asset_events(asset_uri) == []
    # Both witnesses: not a record written, so nothing committed, aborted or open.
    assert_exactly_once(protocol, bootstrap, topic, committed=0, aborted=0)


@pytest.mark.parametrize("bad", [0, -1, True, "2"])
def test_num_partitions_below_one_is_refused_when_the_dag_is_defined(bad, export_env, make_topic):
    with pytest.raises(ConfigurationError, match=r"num_partitions must be an integer >= 1"):
        dagtest.export_dag("bad_partitions", topic=make_topic(1), num_partitions=bad)
    with pytest.raises(ConfigurationError, match=r"num_partitions must be an integer >= 1"):
        SparkKafkaPrepareOperator(
            task_id="prepare",
            export_id="e",
            run_key="k",
            source={"sql": "SELECT 1"},
            topic="t",
            num_partitions=bad,
            id_prefix="p",
        )
    assert not export_env.path.exists()  # the ledger was never opened


def test_misspelt_option_and_malformed_source_are_refused_when_the_dag_is_defined(export_env):
    from airflow.sdk import DAG

    misspelt = "unexpected keyword argument 'partitions'"
    with DAG("malformed", schedule=None), pytest.raises(TypeError, match=misspelt):
        kafka_exactly_once_export(
            "export", source={"sql": "SELECT 1"}, topic="t", num_partitions=1, partitions=2
        )
    with DAG("malformed2", schedule=None), pytest.raises(ConfigurationError, match="exactly one"):
        kafka_exactly_once_export(
            "export", source={"sql": "SELECT 1", "table": "t"}, topic="t", num_partitions=1
        )
