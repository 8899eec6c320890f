"""A refusal raised inside the Spark job keeps its class and words in the task, fails the
task without a retry, and leaves nothing open: spark-submit, under dag.test().

spark-submit reports only an exit code (the Spark provider raises ``AirflowException:
Cannot execute: spark-submit ...``); the application writes its error beside the manifest
and the task raises it again (airflow_provider_kafka2pc/spark/failure.py).
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from airflow_provider_kafka2pc.errors import ConfigurationError
from airflow_provider_kafka2pc.export import default_id_prefix
from airflow_provider_kafka2pc.operators.prepare import SparkKafkaPrepareOperator
from airflow_provider_kafka2pc.version_compat import AirflowFailException
from tests.airflow import dagtest
from tests.conftest import assert_exactly_once

ROWS = 40


class RaisingPrepare(SparkKafkaPrepareOperator):
    """Notes what the prepare task raised, as Airflow's task runner receives it."""

    raised: ClassVar[list[BaseException]] = []

    def execute(self, context: Any) -> Any:
        try:
            return super().execute(context)
        except BaseException as exc:
            RaisingPrepare.raised.append(exc)
            raise


def rows_with(expression: str) -> dict[str, str]:
    return {
        "sql": f"SELECT id AS order_id, CAST(id AS DOUBLE) AS amount, {expression} "
        f"FROM range(0, {ROWS})"
    }


#: case -> (the export's options, given the topic; the words the job refuses with[; the
#: error's class, a ConfigurationError])
CASES = {
    # Met by the job's shuffle, before any transaction opens: a row names another topic.
    "undeclared topic in a row": (
        lambda topic: {
            "topic": None,
            "topic_column": "dest",
            "topics": [topic],
            "source": rows_with(f"IF(id = 7, 'w_typo', '{topic}') AS dest"),
        },
        "names topic w_typo in some rows",
    ),
    # Met on the driver, when the columns are checked.
    "string timestamp column": (
        lambda topic: {"topic": topic, "timestamp_column": "ts", "source": rows_with("'x' AS ts")},
        "timestamp column 'ts' has type string",
    ),
    # Met in the rows, by the JVM, before any transaction opens.
    "timestamp before 1970": (
        lambda topic: {
            "topic": topic,
            "timestamp_column": "ts",
            "source": rows_with(
                "IF(id = 3, CAST(-5000 AS BIGINT), CAST(1700000000000 AS BIGINT)) AS ts"
            ),
        },
        "timestamp column 'ts' holds -5000 (epoch ms); record timestamps must be after 1970",
    ),
    # Met on the driver before anything opens: the topic's retention (7 days) would delete
    # records stamped in March at its next check, minutes after the commit.
    "timestamps the topic would delete": (
        lambda topic: {
            "topic": topic,
            "timestamp_column": "ts",
            "source": rows_with("CAST(1772323200000 + id AS BIGINT) AS ts"),  # 2026-03-01
        },
        "retention.ms",
        "TimestampRefusedError",
    ),
}


#: The cases every other path proves too (test_export_connect, test_external_prepare): one
#: refusal met by the executors in the rows, one met on the driver.
EVERY_PATH = ("undeclared topic in a row", "string timestamp column")


@pytest.mark.parametrize("case", list(CASES))
def test_a_refusal_in_the_job_fails_the_task_once_with_its_own_error(
    case, export_dag, run_export, make_topic, protocol, bootstrap
):
    options, words, *kind = CASES[case]
    topic = make_topic(2)
    RaisingPrepare.raised.clear()
    dag = export_dag(
        retries=2, writer="jvm", operator_classes={"prepare": RaisingPrepare}, **options(topic)
    )

    result = run_export(dag, day=3)

    prefix = default_id_prefix(f"{dag.dag_id}.{dagtest.GROUP_ID}")
    assert_refused_once(
        result,
        "prepare",
        RaisingPrepare.raised,
        words,
        *kind,
        protocol=protocol,
        bootstrap=bootstrap,
        topic=topic,
        prefix=prefix,
    )


def assert_refused_once(
    result: dagtest.DagTestResult,
    task: str,
    raised: list[BaseException],
    words: str,
    kind: str = "ConfigurationError",
    *,
    protocol: Any,
    bootstrap: str,
    topic: str,
    prefix: str,
) -> None:
    """The run failed; ``task`` ran once (permanent: no retry of ``retries=2``) and raised
    the job's own error (class ``kind``), its words first, as Airflow's no-retry failure;
    nothing open under ``prefix``, nothing visible in ``topic`` by both witnesses."""
    assert result.state == "failed", result
    assert result.tasks[task] == "failed", result
    assert result.tries[task] == 1, result.tries
    [error] = raised
    assert isinstance(error, ConfigurationError) and isinstance(error, AirflowFailException)
    assert type(error).__name__ == kind
    assert words in str(error), error
    # No wrapper's words before the job's own (spark-submit's exit, Connect's gRPC error).
    assert not str(error).startswith(("Cannot execute", "the prepare on Spark Connect")), error
    assert [t for t in protocol.list_transactions(prefix=prefix) if t.state == "Ongoing"] == []
    assert_exactly_once(protocol, bootstrap, topic, committed=0, open_=0)
