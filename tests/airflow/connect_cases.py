"""The option matrix's Spark Connect cells (docs/matrix.md): one export per case carrying
many options at once, run the same way on a plain server (test_connect_artifacts) and on a
server started with the jars (test_connect_jvm_writer).

Each case: its spec's options (through :func:`~airflow_provider_kafka2pc.spark.remote.
prepare_remote`, what the Connect task runs), then the witnesses (the log's markers and a
read_committed consumer) and every record read back (:mod:`tests.support.readback`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.spark.connect import remote_session
from airflow_provider_kafka2pc.spark.connect_artifacts import shipped
from airflow_provider_kafka2pc.spark.export_spec import ExportSpec
from airflow_provider_kafka2pc.spark.remote import prepare_remote
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from airflow_provider_kafka2pc.transaction.manifest import Manifest
from tests.conftest import assert_exactly_once, unique_id
from tests.integration.test_wire_formats import consume_all
from tests.support.readback import read_back

ROWS = 300
SHOP_ROW = {"record_name": "Row", "namespace": "shop"}

#: name -> the spec's options besides the source and the topic. Together the cases cover
#: each registry format for values, both for keys, every subject strategy, headers,
#: tombstones, record timestamps, each partitioning Connect can take and each writer.
CASES: dict[str, dict[str, Any]] = {
    "avro-topic-record-name-tombstones-timestamps-hash-auto": {
        "key_column": "id",
        "key_format": {},
        "value_format": {**SHOP_ROW, "subject_name_strategy": "topic_record_name"},
        "header_columns": ("origin",),
        "tombstone_when": "id % 5 = 0",
        "timestamp_column": "ms",
        "partitioning": "hash",
        "writer": "auto",
    },
    "protobuf-keys-record-name-kafka-aligned": {
        "key_column": "k",
        "key_format": {"schema_type": "PROTOBUF"},
        "value_format": {
            **SHOP_ROW,
            "schema_type": "PROTOBUF",
            "subject_name_strategy": "record_name",
        },
        "partitioning": "kafka-aligned",
        "writer": "jvm",
    },
    "json-schema-python-writer": {
        "key_column": "id",
        "value_format": {"schema_type": "JSON"},
        "partitioning": "auto",
        "writer": "python",
    },
}


def rows_file(path: Path, base_ms: int) -> Path:
    """The source: JSON lines (Spark reads its columns sorted: customer, id, k, ms, origin)."""
    lines = []
    for i in range(ROWS):
        row: dict[str, Any] = {"id": i, "customer": f"customer-{i % 97}", "ms": base_ms + i}
        row["k"] = {"id": i}
        if i % 2 == 0:
            row["origin"] = "even"
        lines.append(json.dumps(row) + "\n")
    path.write_text("".join(lines))
    return path


def export_case(
    server_url: str,
    case: str,
    *,
    registry: str,
    settings: dict[str, Any],
    protocol: KafkaProtocol,
    bootstrap: str,
    topic: str,
    tmp_path: Path,
    session_name: str,
    auto_takes: str,
) -> tuple[Manifest, set[str]]:
    """Export ``case`` through the server, commit it, prove it exactly once and read every
    record back. ``auto_takes``: the writer ``auto`` must take on this server. Returns the
    manifest and the jars the session shipped to the server."""
    base = (int(time.time()) - 3600) * 1000  # an hour ago: inside the topic's retention
    source = rows_file(tmp_path / "rows.json", base)
    spec = ExportSpec(source={"path": str(source), "format": "json"}, topic=topic, **CASES[case])
    ids = [unique_id("connect-case") for _ in range(2)]
    with remote_session(server_url, session_name) as spark:
        batch = prepare_remote(
            spark,
            spec,
            transactional_ids=ids,
            manifest=str(tmp_path / "manifest.json"),
            job_label=None,
            producer_config=settings,
            registry={"url": registry},
        )
        jars = shipped(spark)
    assert batch.metadata["writer"] == spec.writer.replace("auto", auto_takes), batch.metadata
    outcomes = TransactionController(protocol).commit_all(batch.committables)
    assert {o.outcome for o in outcomes} == {Outcome.COMMITTED}
    report, _ = assert_exactly_once(
        protocol, bootstrap, topic, *batch.committables, committed=ROWS, aborted=0
    )
    assert report.tombstones == (ROWS // 5 if spec.tombstone_when else 0)
    read_back(spec, registry, consume_all(bootstrap, topic, ROWS), topic, range(ROWS), base)
    return batch, jars
