"""The export spec: one object, validated once, the same through JSON, the command line and
the readers of older layouts."""

from __future__ import annotations

import dataclasses
import json

import pytest

from airflow_provider_kafka2pc.errors import (
    ConfigurationError,
    PrepareError,
    SchemaRefusedError,
    SourceChangedError,
)
from airflow_provider_kafka2pc.spark.export_spec import (
    EXPORT_SPEC_VERSION,
    OPTIONS,
    ExportSpec,
    from_argv,
)
from airflow_provider_kafka2pc.spark.external import JobParameters
from airflow_provider_kafka2pc.spark.failure import JobFailure, job_message

#: A value other than the default for every option: the round trips below cover each field.
EVERY_OPTION = ExportSpec(
    source={"path": "/d", "format": "csv", "options": {"header": "true"}, "filter": "x > 1"},
    topic_column="dest",
    topics=("orders", "refunds"),
    key_column="id",
    value_column="payload",
    header_columns=("trace", "origin"),
    value_format={"schema_type": "JSON", "subject_name_strategy": "topic_record_name"},
    key_format={"record_name": "Key"},
    tombstone_when="deleted",
    timestamp_column="ts",
    allow_expiring_timestamps=True,
    transaction_timeout_ms=60000,
    progress_interval_s=5.0,
    align_with_kafka=False,
    partitioning="hash",
    writer="python",
)


def test_every_option_is_set_in_the_round_trips():
    unset = [
        f.name for f in dataclasses.fields(ExportSpec) if getattr(EVERY_OPTION, f.name) == f.default
    ]
    assert unset == ["topic"]  # topic_column is given instead
    assert [f.name for f in dataclasses.fields(ExportSpec)] == list(OPTIONS)


@pytest.mark.parametrize("spec", [EVERY_OPTION, ExportSpec(topic="t", source={"table": "x"})])
def test_json_and_the_command_line_give_back_the_same_spec(spec):
    assert ExportSpec.from_dict(json.loads(spec.to_json())) == spec
    assert from_argv(spec.to_argv()) == spec


def test_every_option_has_help_for_the_command_line():
    for f in dataclasses.fields(ExportSpec):
        assert f.metadata.get("help"), f.name


def test_the_spec_is_frozen_and_validated_once():
    with pytest.raises(dataclasses.FrozenInstanceError):
        EVERY_OPTION.writer = "jvm"  # type: ignore[misc]
    for bad, named in (
        ({"topic": "t", "topic_column": "c", "topics": ["t"]}, "exactly one of topic"),
        ({"topic": "t", "writer": "rust"}, "writer"),
        ({"topic": "t", "partitioning": "shuffle"}, "partitioning must be one of"),
        ({"topic": "t", "transaction_timeout_ms": 0}, "transaction_timeout_ms"),
        ({"topic": "t", "value_format": {"nope": 1}}, "unknown registry format option"),
        ({"topic": "t", "source": {"sql": "x", "table": "y"}}, "exactly one of"),
    ):
        with pytest.raises(ConfigurationError, match=named):
            ExportSpec(**bad)


def test_another_version_or_an_unknown_option_is_refused_by_name():
    record = EVERY_OPTION.to_dict()
    assert record["version"] == EXPORT_SPEC_VERSION
    with pytest.raises(ConfigurationError, match="version 99"):
        ExportSpec.from_dict({**record, "version": 99})
    with pytest.raises(ConfigurationError, match=r"unknown options \['compression'\]"):
        ExportSpec.from_dict({**record, "compression": "zstd"})


def test_the_shuffle_of_earlier_releases_reads_as_its_partitioning():
    assert from_argv(["--topic", "t", "--shuffle"]).partitioning == "kafka-aligned"
    assert from_argv(["--topic", "t", "--no-shuffle"]).partitioning == "source-splits"
    assert ExportSpec(topic="t", partitioning=None, align_with_kafka=False).partitioning == "hash"


def test_job_parameters_carry_the_spec_and_read_release_0_2_0s():
    params = JobParameters(EVERY_OPTION, ("p-0", "p-1"), "label", "/m.json")
    assert JobParameters.from_dict(json.dumps(params.to_dict())) == params
    old = JobParameters.from_dict(
        {
            "version": 1,
            "topic": "orders",
            "transactional_ids": ["p-0"],
            "job_label": "label",
            "manifest": "/m.json",
            "transaction_timeout_ms": 60000,
            "key_column": "id",
            "value_column": None,
            "header_columns": ["h"],
            "align_with_kafka": True,
            "prepared": False,
        }
    )
    assert old.export == ExportSpec(
        topic="orders", key_column="id", header_columns=("h",), transaction_timeout_ms=60000
    )
    with pytest.raises(ConfigurationError, match="version 3"):
        JobParameters.from_dict({**params.to_dict(), "version": 3})


@pytest.mark.parametrize(
    ("raised", "kind"),
    [
        (ConfigurationError("topic column 'dest' names topic w_typo"), ConfigurationError),
        (SchemaRefusedError("subject orders-value refused"), SchemaRefusedError),
        (PrepareError("partition 3 failed"), PrepareError),
        # more arguments than a message: the kind survives, named in the message
        (SourceChangedError("rows changed", (1, 2)), ConfigurationError),
    ],
)
def test_a_job_failure_is_raised_again_with_its_class_and_words(raised, kind):
    failure = JobFailure.from_json(JobFailure.of(raised).to_json())
    again = failure.exception(" (the Spark log is above)")
    assert type(again) is kind
    assert str(again).endswith(f"{raised} (the Spark log is above)")
    assert JobFailure.from_json("not json") is None


class _JavaError:
    """A py4j ``JavaObject`` of an exception, as far as :func:`job_message` asks it."""

    def __init__(self, name: str, message: str, cause: _JavaError | None = None) -> None:
        self.name, self.message, self.cause = name, message, cause

    def getClass(self):  # Java's names
        return type("Class", (), {"getSimpleName": lambda _: self.name})()

    def getMessage(self):
        return self.message

    def getCause(self):
        return self.cause


def test_a_failed_jobs_message_is_its_own_words_not_its_stack():
    """A failed write's PrepareError says what failed (the root cause too), in one line."""
    root = _JavaError("TimeoutException", "Expiring 12 record(s) for orders-3")
    java = _JavaError("SparkException", "Job aborted due to stage failure", root)
    py4j = Exception("An error occurred while calling o81.collect.\n: java stack ...")
    py4j.java_exception = java  # type: ignore[attr-defined]
    assert job_message(py4j) == (
        "SparkException: Job aborted due to stage failure "
        "(TimeoutException: Expiring 12 record(s) for orders-3)"
    )
    connect = Exception("[TASK_FAILED] row 7 cannot be computed\n  JVM stacktrace: ...")
    assert job_message(connect) == "[TASK_FAILED] row 7 cannot be computed"
    assert job_message(Exception()) == "Exception"


def test_a_raw_grpc_error_of_connect_gives_the_servers_words():
    """An error the Connect client raised as gRPC's own: its details, not its repr."""
    grpc = pytest.importorskip("grpc")

    class Rendezvous(grpc.RpcError):
        def details(self):
            return "java.lang.NoClassDefFoundError: com/google/protobuf/Message\n\tat ..."

        def __str__(self):
            return "<_MultiThreadedRendezvous of RPC that terminated with:\n\tstatus = ..."

    said = job_message(Rendezvous())
    assert said == "java.lang.NoClassDefFoundError: com/google/protobuf/Message"


def test_prepare_in_job_raises_a_permanent_error_as_its_process_says(monkeypatch):
    """On a platform (no Airflow) a refusal leaves ``prepare_in_job`` as itself; in an
    Airflow worker the lease operator's module makes it Airflow's no-retry failure too
    (here a stand-in: this tier imports no Airflow)."""
    from airflow_provider_kafka2pc.spark import external

    class TaskFailure(Exception):
        pass

    newer = {"version": 99}
    monkeypatch.setattr(external, "_permanent_error", None)
    with pytest.raises(ConfigurationError, match="version 99") as caught:
        external.prepare_in_job(None, newer, {})
    assert type(caught.value) is ConfigurationError

    external.raise_permanent_errors_as(lambda exc: TaskFailure(str(exc)))
    with pytest.raises(TaskFailure, match="version 99") as caught:
        external.prepare_in_job(None, newer, {})
    assert type(caught.value.__cause__) is ConfigurationError
