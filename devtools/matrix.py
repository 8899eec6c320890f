"""The option matrix: every export option on every path, what the prepare does with it, and
the tests that prove it (``docs/matrix.md`` is generated from here).

What a cell says is computed, not written: each option is an :class:`ExportSpec`, each path
the facts the prepare's plan finds there (:class:`WriterFacts`), and the plan's own pure
functions (:func:`run_refusals`, :func:`decide_writer`) give the writer or the refusal. A
change of the plan therefore changes the table, and ``tests/unit/test_matrix.py`` fails
until ``python -m devtools.matrix > docs/matrix.md`` is run again; it also fails when a
proof names a test that does not exist.

    python -m devtools.matrix > docs/matrix.md
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_provider_kafka2pc.errors import ConfigurationError, Kafka2pcError
from airflow_provider_kafka2pc.spark.export_spec import ExportSpec
from airflow_provider_kafka2pc.spark.plan import WriterFacts, decide_writer, run_refusals

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Path_:
    """One way a prepare runs, and the facts its plan finds there."""

    key: str
    title: str
    connect: bool
    jvm: bool  # the session loads the JVM writer
    why_not_jvm: str = ""
    #: The JVM writer's jars are shipped to it only when asked for by name (writer="jvm").
    ships_on_request: bool = False


PATHS = (
    Path_("submit", "spark-submit, client mode", connect=False, jvm=True),
    Path_("cluster", "spark-submit, cluster mode (standalone)", connect=False, jvm=True),
    # The JVM writer's jars ship as session artifacts for writer="jvm" (connect_artifacts.py).
    Path_(
        "connect",
        "plain Spark Connect server",
        connect=True,
        jvm=False,
        why_not_jvm="the server has not the project's jar and kafka-clients on its class path",
        ships_on_request=True,
    ),
    Path_("connect-jars", "Spark Connect server with the jars", connect=True, jvm=True),
    Path_("in-job", "prepare_in_job (@task.pyspark)", connect=False, jvm=True),
    # The repair's prepare (``prepare_export`` with a ``Repair``), in process or by spark-submit.
    Path_("repair", "loss repair", connect=False, jvm=True),
)

AVRO: dict[str, Any] = {}
JSON = {"schema_type": "JSON"}
PROTOBUF = {"schema_type": "PROTOBUF"}

#: (option, the spec that sets it): each row of the matrix.
OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("topic", {}),
    ("topic_column + topics (several topics)", {"topic": None, "topic_column": "to"}),
    ("key_column", {"key_column": "id"}),
    ("value_column", {"value_column": "payload"}),
    ("header_columns", {"header_columns": ("trace",)}),
    ("value_format: registry Avro", {"value_format": AVRO}),
    ("value_format: registry JSON Schema", {"value_format": JSON}),
    ("value_format: registry Protobuf", {"value_format": PROTOBUF}),
    ("key_format: registry Avro", {"key_column": "id", "key_format": AVRO}),
    ("key_format: registry Protobuf", {"key_column": "id", "key_format": PROTOBUF}),
    (
        "subject strategy record_name",
        {"value_format": {"subject_name_strategy": "record_name", "record_name": "Order"}},
    ),
    (
        "subject strategy topic_record_name",
        {"value_format": {"subject_name_strategy": "topic_record_name", "record_name": "Order"}},
    ),
    ("tombstone_when", {"tombstone_when": "deleted"}),
    ("timestamp_column", {"timestamp_column": "ts"}),
    ("partitioning auto", {"partitioning": "auto"}),
    ("partitioning source-splits", {"partitioning": "source-splits"}),
    ("partitioning kafka-aligned", {"key_column": "id", "partitioning": "kafka-aligned"}),
    ("partitioning hash", {"partitioning": "hash"}),
    ("writer auto", {"writer": "auto"}),
    ("writer python", {"writer": "python"}),
    ("writer jvm", {"writer": "jvm"}),
)

#: (option, path) -> the tests that run it there and prove it exactly once (both witnesses;
#: for registry formats, the registry's own deserializer) or refused before anything opens.
PROOFS: dict[tuple[str, str], tuple[str, ...]] = {}


def _prove(options: tuple[str, ...], paths: tuple[str, ...], *tests: str) -> None:
    for option in options:
        for path in paths:
            PROOFS[(option, path)] = PROOFS.get((option, path), ()) + tests


SUBMIT_E2E = (
    "tests/airflow/test_export_happy.py::"
    "test_happy_path_commits_exactly_once_without_leaking_secrets"
)
_prove(
    ("topic", "key_column", "writer auto", "writer python", "writer jvm", "partitioning auto"),
    ("submit",),
    SUBMIT_E2E,
)
_prove(
    ("topic_column + topics (several topics)",),
    ("submit",),
    "tests/airflow/test_export_multitopic.py::test_one_export_commits_every_topic_once",
)
_prove(
    (
        "value_format: registry Avro",
        "subject strategy topic_record_name",
        "tombstone_when",
        "timestamp_column",
    ),
    ("submit",),
    "tests/airflow/test_export_wire.py::test_registry_avro_tombstones_and_timestamps_through_the_task_group",
)
_prove(
    ("value_column", "header_columns"),
    ("submit",),
    "tests/integration/test_spark_prepare.py::test_value_and_header_columns",
)
_prove(
    ("value_format: registry JSON Schema",),
    ("submit",),
    "tests/integration/test_wire_formats.py::test_json_schema_values_read_back_through_the_registry",
)
_prove(
    ("value_format: registry Protobuf", "key_format: registry Protobuf"),
    ("submit",),
    "tests/integration/test_wire_formats.py::test_protobuf_values_and_keys_read_back_through_the_registry",
)
_prove(
    ("key_format: registry Avro",),
    ("submit",),
    "tests/integration/test_wire_formats.py::test_registry_avro_values_and_keys_read_back_through_the_registry",
)
_prove(
    ("subject strategy record_name",),
    ("submit",),
    "tests/integration/test_wire_formats.py::test_a_given_schema_under_the_record_name_strategy",
)
_prove(
    ("partitioning source-splits",),
    ("submit",),
    "tests/integration/test_source_splits.py::test_an_export_by_source_splits_is_exactly_once",
)
_prove(
    ("partitioning kafka-aligned",),
    ("submit",),
    "tests/integration/test_spark_prepare.py::test_kafka_aligned_partitions_each_own_their_kafka_partitions",
)
_prove(
    ("partitioning hash",),
    ("submit",),
    "tests/integration/test_spark_prepare.py::test_alignment_falls_back_to_hash_and_says_why",
)
CONNECT_E2E = (
    "tests/airflow/test_export_connect.py::"
    "test_export_on_connect_is_exactly_once_keeps_the_secret_off_the_server_and_reruns_nothing"
)
_prove(("topic", "key_column", "writer auto", "partitioning auto"), ("connect",), CONNECT_E2E)
_prove(
    ("partitioning source-splits",),
    ("connect",),
    "tests/airflow/test_connect_options.py::"
    "test_an_option_connect_cannot_honour_is_refused_before_anything_is_written",
)
_prove(
    (
        "topic_column + topics (several topics)",
        "value_format: registry Avro",
        "tombstone_when",
        "timestamp_column",
        "writer auto",
    ),
    ("connect",),
    "tests/airflow/test_export_connect.py::"
    "test_several_topics_registry_avro_tombstones_and_timestamps_through_a_plain_server",
)
_prove(
    ("writer jvm",),
    ("connect",),
    "tests/airflow/test_export_connect.py::"
    "test_the_jvm_writer_asked_for_through_the_task_on_a_plain_server_is_exactly_once",
)
_prove(
    ("topic_column + topics (several topics)", "value_column", "writer jvm"),
    ("connect",),
    "tests/airflow/test_connect_artifacts.py::"
    "test_the_jvm_writer_on_a_plain_server_ships_the_jars_and_writes_several_topics",
)
#: What tests/airflow/connect_cases.py's cases set between them, on both kinds of server.
CONNECT_CASES = (
    "key_column",
    "header_columns",
    "value_format: registry Avro",
    "value_format: registry JSON Schema",
    "value_format: registry Protobuf",
    "key_format: registry Avro",
    "key_format: registry Protobuf",
    "subject strategy record_name",
    "subject strategy topic_record_name",
    "tombstone_when",
    "timestamp_column",
    "partitioning auto",
    "partitioning kafka-aligned",
    "partitioning hash",
    "writer auto",
    "writer python",
    "writer jvm",
)
_prove(
    CONNECT_CASES,
    ("connect",),
    "tests/airflow/test_connect_artifacts.py::"
    "test_registry_values_through_a_plain_server_read_back_against_the_registry",
)
_prove(
    ("topic", *CONNECT_CASES),
    ("connect-jars",),
    "tests/airflow/test_connect_jvm_writer.py::"
    "test_every_option_on_a_server_with_the_jars_is_exactly_once_and_reads_back",
)
_prove(
    ("topic_column + topics (several topics)", "key_column", "value_column", "writer auto"),
    ("connect-jars",),
    "tests/airflow/test_connect_jvm_writer.py::test_auto_on_a_server_with_the_jar_prepares_several_topics_with_the_jvm_writer_exactly_once",
)
_prove(
    ("topic", "key_column", "writer auto", "partitioning auto"),
    ("in-job",),
    "tests/airflow/test_external_prepare.py::test_pyspark_task_prepares_exactly_once_and_a_rerun_writes_nothing",
)
_prove(
    (
        "topic_column + topics (several topics)",
        "value_format: registry Avro",
        "value_format: registry Protobuf",
        "value_format: registry JSON Schema",
        "key_format: registry Avro",
        "key_format: registry Protobuf",
        "subject strategy record_name",
        "subject strategy topic_record_name",
        "header_columns",
        "partitioning hash",
        "partitioning kafka-aligned",
        "tombstone_when",
        "timestamp_column",
        "writer auto",
        "writer python",
        "writer jvm",
    ),
    ("in-job",),
    "tests/integration/test_wire_formats.py::test_prepare_in_job_takes_several_topics_registry_avro_tombstones_and_timestamps",
)
_prove(
    ("topic", "key_column", "writer jvm"),
    ("repair",),
    "tests/integration/test_spark_prepare.py::test_jvm_writer_repairs_a_lost_partition_exactly_once",
)
_prove(
    (
        "topic",
        "key_column",
        "value_column",
        "header_columns",
        "value_format: registry Avro",
        "value_format: registry JSON Schema",
        "value_format: registry Protobuf",
        "key_format: registry Avro",
        "key_format: registry Protobuf",
        "subject strategy record_name",
        "subject strategy topic_record_name",
        "tombstone_when",
        "timestamp_column",
        "partitioning auto",
        "partitioning hash",
        "writer auto",
        "writer python",
        "writer jvm",
    ),
    ("repair",),
    "tests/integration/test_wire_formats.py::"
    "test_a_lost_participant_is_repaired_exactly_once_with_every_option",
)
_prove(
    ("topic_column + topics (several topics)",),
    ("repair",),
    "tests/airflow/test_export_multitopic.py::test_a_loss_across_topics_is_repaired_exactly_once_per_topic",
)
_prove(
    ("partitioning source-splits",),
    ("repair",),
    "tests/airflow/test_export_source_splits.py::test_an_export_by_source_splits_repairs_its_lost_participants_exactly_once",
)
_prove(
    ("partitioning kafka-aligned",),
    ("repair",),
    "tests/airflow/test_loss_repair.py::test_a_repair_after_partitions_were_added_partitions_as_its_prepare_did",
)


_prove(
    ("partitioning source-splits",),
    ("connect-jars",),
    "tests/airflow/test_connect_jvm_writer.py::"
    "test_source_splits_are_refused_on_this_server_too_before_anything_is_written",
)
_prove(
    ("topic", "key_column", "value_column", "partitioning source-splits", "writer auto"),
    ("in-job",),
    "tests/integration/test_source_splits.py::"
    "test_prepare_in_job_writes_each_source_split_with_a_value_column",
)
_prove(
    (
        "topic",
        "key_column",
        "value_format: registry Avro",
        "key_format: registry Avro",
        "writer auto",
        "partitioning auto",
    ),
    ("cluster",),
    "tests/airflow/test_export_cluster_mode.py::"
    "test_cluster_deploy_mode_with_registry_avro_values_and_keys_commits_exactly_once",
)
_prove(
    ("topic", "key_column", "value_column", "partitioning source-splits", "writer auto"),
    ("cluster",),
    "tests/airflow/test_export_cluster_mode.py::"
    "test_cluster_deploy_mode_writes_each_source_split_with_a_value_column",
)
_prove(
    (
        "topic_column + topics (several topics)",
        "key_column",
        "header_columns",
        "value_format: registry JSON Schema",
        "subject strategy topic_record_name",
        "tombstone_when",
        "timestamp_column",
        "partitioning hash",
        "writer python",
    ),
    ("cluster",),
    "tests/airflow/test_export_cluster_mode.py::"
    "test_cluster_deploy_mode_with_every_wire_option_commits_every_topic_once",
)
_prove(
    (
        "topic",
        "key_column",
        "value_format: registry Protobuf",
        "key_format: registry Protobuf",
        "subject strategy record_name",
        "partitioning kafka-aligned",
        "writer jvm",
    ),
    ("cluster",),
    "tests/airflow/test_export_cluster_mode.py::"
    "test_cluster_deploy_mode_with_registry_protobuf_and_the_jvm_writer_commits_once",
)


def facts(path: Path_, spec: ExportSpec) -> WriterFacts:
    if path.jvm or (path.ships_on_request and spec.writer == "jvm"):
        return WriterFacts(connect=path.connect, jvm_version="4.4.0")
    return WriterFacts(connect=path.connect, jvm_refused=ConfigurationError(path.why_not_jvm))


def spec_of(options: dict[str, Any]) -> ExportSpec:
    base: dict[str, Any] = {"topic": "orders"}
    if options.get("topic", "orders") is None:
        base = {"topics": ("orders", "refunds")}
    return ExportSpec(**{**base, **options})


@dataclass(frozen=True)
class Cell:
    """What the prepare does with an option on a path, and the tests that prove it."""

    writer: str | None  # the writer it takes; None: refused
    refusal: str | None
    proofs: tuple[str, ...]


def cell(option: str, spec: ExportSpec, path: Path_) -> Cell:
    refusals = run_refusals(spec, ["a-0"], connect=path.connect, speculation=False)
    proofs = PROOFS.get((option, path.key), ())
    if refusals:
        return Cell(None, "; ".join(refusals), proofs)
    try:
        return Cell(decide_writer(spec.writer, facts(path, spec)).writer, None, proofs)
    except Kafka2pcError as exc:
        return Cell(None, str(exc), proofs)


def rows() -> Iterator[tuple[str, list[Cell]]]:
    for option, options in OPTIONS:
        spec = spec_of(options)
        yield option, [cell(option, spec, path) for path in PATHS]


def render() -> str:
    """The matrix as a Markdown page: a table, then the proofs and the refusals it cites."""
    table = list(rows())
    proofs = sorted({t for _, cells in table for c in cells for t in c.proofs})
    refusals = sorted({c.refusal for _, cells in table for c in cells if c.refusal})
    lines = [
        "# Options on every path",
        "",
        "Generated by `python -m devtools.matrix > docs/matrix.md` from the prepare's own",
        "plan (`spark/plan.py`) and the tests that prove each cell; `tests/unit/test_matrix.py`",
        "fails when the plan or a proof changes without this page.",
        "",
        "A cell says which writer the prepare takes there, or that it refuses before any",
        "transaction opens (why: the lettered notes); then **✓** and the tests that run it on",
        "that path and prove it exactly once by both witnesses (the log audit and a",
        "read_committed consumer; registry formats also by the registry's own deserializer),",
        "or *untested*.",
        "",
        "| option | " + " | ".join(p.title for p in PATHS) + " |",
        "|---|" + "---|" * len(PATHS),
    ]
    for option, cells in table:
        lines.append(
            f"| {option} | " + " | ".join(_text(c, proofs, refusals) for c in cells) + " |"
        )
    lines += ["", "## Proofs", ""]
    lines += [f"{i}. `{test}`" for i, test in enumerate(proofs, 1)]
    lines += ["", "## Refusals", ""]
    lines += [f"- ({_letter(i)}) {why}" for i, why in enumerate(refusals)]
    return "\n".join(lines) + "\n"


def _text(c: Cell, proofs: list[str], refusals: list[str]) -> str:
    outcome = c.writer or f"refused ({_letter(refusals.index(c.refusal or ''))})"
    if not c.proofs:
        return f"{outcome}, *untested*"
    return f"{outcome} ✓ " + ",".join(str(proofs.index(t) + 1) for t in c.proofs)


def _letter(index: int) -> str:
    return "abcdefghijklmnopqrstuvwxyz"[index]


def missing_tests(root: Path = ROOT) -> list[str]:
    """Proofs naming a test file or function that does not exist."""
    missing = []
    for test in sorted({t for tests in PROOFS.values() for t in tests}):
        file, _, name = test.partition("::")
        path = root / file
        if not path.exists() or name not in _functions(path):
            missing.append(test)
    return missing


def _functions(path: Path) -> set[str]:
    return {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}


main: Callable[[], None] = lambda: print(render(), end="")  # noqa: E731

if __name__ == "__main__":
    main()
