"""kafka2pc's value encodings side by side: JSON (the default), registry Avro, JSON Schema
and Protobuf.

``make bench-wire``. Issue 29 asks that the schema registry's wire format not make an
export slower than the JSON default. On one local Apache Kafka broker and one schema
registry (the tests' Apicurio Registry, started once, untimed, left out of every run's
CPU), from the same generated parquet files of typed columns (``harness/typed.py``: id
long, key string, string, int, double, boolean, timestamp, date, a nullable string; in
``--partitions`` files), each system is one kafka2pc export, run as the bench-peers
"kafka2pc" system runs it: spark-submit of the package's prepare application
(``local[--cores]``, ``--partitions`` transactions, keyed by ``key``, the package's
default partitioning and writer unless ``--partitioning`` / ``--writer`` say otherwise,
the same for every system), then ``kafka2pc commit`` of its manifest. The value is the
whole row:

- "kafka2pc JSON": the default, Spark's ``to_json`` of the row;
- "kafka2pc Avro (registry)": ``--value-format {}``, Avro derived from the columns,
  registered under ``<topic>-value``, encoded in the JVM by spark-avro's ``to_avro`` behind
  the 5-byte header;
- "kafka2pc JSON Schema (registry)": ``--value-format {"schema_type": "JSON"}``, the same
  JSON behind the header, its schema derived and registered;
- "kafka2pc Protobuf (registry)": ``--value-format {"schema_type": "PROTOBUF"}``, proto3
  derived from the columns, each message encoded in the JVM by the package's UDF with
  protobuf-java, behind the header and the message index. The package refuses a ``date``
  column for Protobuf, so this system reads the same files through ``--source-sql``, every
  column in the same order with the date as its days since 1970 (``unix_date(day)``, an
  int: what Avro's logical date carries), as a user would cast it. A projection over the
  file source: Spark reads the same splits, and the manifests' source-split layouts are
  compared across the systems.

Every system's spark-submit gets the same class path: the package's jar and Spark's Avro
package (``spark-avro`` and its dependencies, resolved once into the Ivy cache the tests
use, then passed as ``spark.jars``: no run pays a resolution; an operator run adds
``--packages`` instead, whose resolution from a warm cache is not in these figures); the
Protobuf system's also has protobuf-java (fetched once into the package's cache, as the
package's own spark-submit adds it for a Protobuf format).

Every run is verified before any time is printed: the log audit (every committable
committed in full, nothing open, nothing outside a transaction), a read_committed reader
(records per partition equal to the audit's and to Java's murmur2 placement of the keys,
hence equal across systems; no key twice), then every value read back: its header carries
the schema id registered for the run's subject (for Protobuf then the message index 0),
and the values are decoded (``json``, confluent-kafka's ``AvroDeserializer`` /
``JSONDeserializer`` / ``ProtobufDeserializer`` asking the registry; for Protobuf with a
message class built from the file descriptor the registry holds for the subject) and
compared field by field with the source's row of their key. All of them when that takes
under ``--decode-budget-s`` at the cost measured in the warm-up (which decodes all), else
the rows whose id is a multiple of a stride (the same rows for every system, at least
10,000 per partition); the output says which.

Printed: wall time per system (median of ``--rounds`` interleaved rounds after an untimed
warm-up), CPU, the broker's CPU, the phases from Spark's event log, the ratios Avro/JSON,
JSON Schema/JSON and Protobuf/JSON, the value bytes on the wire and the topic's bytes on
the broker's disk, the source splits' equality, with the load average.

Run: ``python benchmarks/bench_wire.py [--rows 2000000 --partitions 8 --rounds 3]``.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from harness import (
    Cluster,
    Expected,
    Results,
    Round,
    Run,
    Side,
    Verification,
    add_cluster_arguments,
    add_subset_argument,
    event_log_conf,
    fmt,
    interleave,
    machine_line,
    measure,
    median,
    now_ms,
    parse_subset,
    print_results,
    print_table,
    print_verification,
    same_partition_counts,
    timeline,
    verify_topic,
)
from harness.registry import HOME, Registry, schema_registry
from harness.spark import kafka2pc_commit, stage_cpu
from harness.typed import TypedDataset, from_json
from harness.values import Decode, ValuesCheck, check_values, choose_stride

from airflow_provider_kafka2pc.connection.registry import wire_header
from airflow_provider_kafka2pc.spark import AVRO_PACKAGE, PROTOBUF_JAVA
from airflow_provider_kafka2pc.spark.maven import fetch_jar
from airflow_provider_kafka2pc.transaction.manifest import Manifest
from devtools.broker import fetch_kafka
from devtools.spark_submit import submit_prepare

WORK_DIR = Path("/tmp/kafka2pc-bench/wire")
#: The command line the package installs beside this interpreter.
#: Where the tests resolve Spark's Avro package (``tests/integration/test_wire_formats.py``).
IVY = HOME / "spark-ivy"

JSON_VALUES = "kafka2pc JSON"
AVRO_VALUES = "kafka2pc Avro (registry)"
JSON_SCHEMA_VALUES = "kafka2pc JSON Schema (registry)"
PROTOBUF_VALUES = "kafka2pc Protobuf (registry)"
SYSTEMS = (JSON_VALUES, AVRO_VALUES, JSON_SCHEMA_VALUES, PROTOBUF_VALUES)
#: Each system's ``--value-format`` (None: the default, the row as JSON).
VALUE_FORMATS: dict[str, dict[str, str] | None] = {
    JSON_VALUES: None,
    AVRO_VALUES: {},
    JSON_SCHEMA_VALUES: {"schema_type": "JSON"},
    PROTOBUF_VALUES: {"schema_type": "PROTOBUF"},
}
LEGEND = {
    JSON_VALUES: "the default: the row as JSON (Spark's to_json)",
    AVRO_VALUES: "--value-format {}: registry Avro derived from the columns (to_avro + header)",
    JSON_SCHEMA_VALUES: '--value-format {"schema_type": "JSON"}: to_json + header, '
    "JSON Schema derived and registered",
    PROTOBUF_VALUES: '--value-format {"schema_type": "PROTOBUF"}: proto3 derived from the '
    "columns, the date read as its days since 1970 (--source-sql), encoded in the JVM "
    "(protobuf-java) + header and message index",
}
#: The Protobuf system's source: the same files, every column in the same order, the date
#: as its days since 1970 (what Avro's logical date carries), since the product refuses a
#: date column for Protobuf by name (docs/wire-formats.md) and a user would cast it. The
#: query is a projection over the file source: Spark reads the same splits.
DAYS_SQL = (
    "SELECT id, key, customer, quantity, amount, active, created, unix_date(day) AS day, "
    "note FROM parquet.`{path}`"
)
#: Named parts of a run: Spark's tasks' executor CPU (``harness.spark.stage_cpu``). The
#: values are encoded in the stages that write the shuffle (with ``--partitioning source``,
#: no shuffle: in the writing stage); the Python writer's stage feeds the workers.
MAP_CPU = "tasks' JVM CPU: shuffle map stages"
WRITE_CPU = "tasks' JVM CPU: other stages"
#: The ratios printed: wall, CPU, the broker's, and the tasks' JVM CPU by kind of stage.
METRICS = ("seconds", "cpu", "broker_cpu", MAP_CPU, WRITE_CPU)
#: ``--partitioning``: the prepare application's options for each (default: none given).
PARTITIONINGS = {
    "default": (),
    "aligned": ("--align-with-kafka",),
    "hash": ("--no-align-with-kafka",),
    "source": ("--no-shuffle",),
}


def avro_jars() -> list[Path]:
    """Spark's Avro package and its dependencies, resolved once (by a session of their own,
    as the tests do) into the Ivy cache the tests share."""
    jars = IVY / "jars"
    if not list(jars.glob("*spark-avro_2.13-*.jar")):
        code = (
            "from pyspark.sql import SparkSession; SparkSession.builder.master('local[1]')"
            f".config('spark.jars.packages', {AVRO_PACKAGE!r})"
            f".config('spark.jars.ivy', {str(IVY)!r}).getOrCreate().stop()"
        )
        subprocess.run([sys.executable, "-c", code], check=True, timeout=900)
    return sorted(jars.glob("*.jar"))


def system_jars(system: str, avro: list[Path]) -> list[Path]:
    """``system``'s ``spark.jars``: Spark's Avro package for every system, and protobuf-java
    for Protobuf (its encoder's dependency, fetched once into the package's cache: what the
    package's own spark-submit adds for a Protobuf format)."""
    value_format = VALUE_FORMATS[system] or {}
    protobuf = value_format.get("schema_type") == "PROTOBUF"
    return [*avro, *([fetch_jar(PROTOBUF_JAVA)] if protobuf else [])]


#: Confluent's message indexes of a file's first message (the one the package writes when it
#: derives the schema): the single byte 0, after the 5-byte header.
FIRST_MESSAGE = b"\x00"
_UNIX_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_UNIX_DAY = dt.date(1970, 1, 1)


def protobuf_decoder(client: SchemaRegistryClient, subject: str) -> Decode:
    """confluent-kafka's ``ProtobufDeserializer`` with a message class built from the schema
    the registry holds for ``subject`` (the base64 ``FileDescriptorProto`` the package
    registers: its first message), each message made a row (:func:`from_protobuf`)."""
    registered = client.get_latest_version(subject).schema.schema_str
    file = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(registered or ""))
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(file)
    name = f"{file.package}.{file.message_type[0].name}".lstrip(".")
    message_class = GetMessageClass(pool.FindMessageTypeByName(name))
    deserializer = ProtobufDeserializer(message_class, {}, schema_registry_client=client)
    fields = [(f.name, f.has_presence) for f in message_class.DESCRIPTOR.fields]
    return lambda value, ctx: from_protobuf(deserializer(value, ctx), fields)


def from_protobuf(message: Message, fields: list[tuple[str, bool]]) -> dict[str, Any]:
    """A decoded message as :func:`~harness.typed.row_of` gives a row. proto3 leaves zero,
    false and "" out of the bytes, and reading such a field gives that default back; a field
    with presence (``optional``, a message) that is absent was a null: None. The Timestamp
    becomes an aware datetime, ``day`` (days since 1970, :data:`DAYS_SQL`) a date."""
    row: dict[str, Any] = {}
    for name, presence in fields:
        absent = presence and not message.HasField(name)
        row[name] = None if absent else getattr(message, name)
    if (created := row.get("created")) is not None:
        micros = created.nanos // 1000
        row["created"] = _UNIX_EPOCH + dt.timedelta(seconds=created.seconds, microseconds=micros)
    if (day := row.get("day")) is not None:
        row["day"] = _UNIX_DAY + dt.timedelta(days=day)
    return row


def same_splits(runs: list[Run]) -> tuple[bool, int]:
    """Whether the runs of each size read the same Spark partitions: the manifests' digest
    of which byte ranges of which files each partition read (source-split partitioning
    only; else None for all, nothing to tell apart). Also how many runs recorded one."""
    by_rows: dict[int, set[str | None]] = {}
    for run in runs:
        by_rows.setdefault(run.rows, set()).add(run.info.get("split_layout"))
    recorded = sum(1 for run in runs if run.info.get("split_layout") is not None)
    return all(len(layouts) == 1 for layouts in by_rows.values()), recorded


@dataclasses.dataclass
class WireVerification(Verification):
    """The harness' verification plus the values read back (:mod:`harness.values`), whose
    problems are among :attr:`problems`."""

    values: ValuesCheck | None = None

    def summary(self) -> str:
        text = Verification.summary(dataclasses.replace(self, problems=[]))
        if self.values is not None:
            text += f"; {self.values.summary()}"
        return text + ("" if self.ok else " -- FAILED: " + "; ".join(self.problems))


class WireBench:
    """The systems, each writing the same typed rows into fresh topics of one broker."""

    def __init__(
        self,
        args: argparse.Namespace,
        cluster: Cluster,
        registry: Registry | None,
        jars: dict[str, list[Path]],
    ) -> None:
        self.args, self.cluster, self.registry, self.jars = args, cluster, registry, jars
        self.full = TypedDataset(args.rows)
        self.warm = TypedDataset(min(args.rows, args.warmup_rows))
        self.work = WORK_DIR / cluster.prefix
        self.work.mkdir(parents=True, exist_ok=True)
        self.master = f"local[{args.cores}]"
        #: Seconds to decode one value, per system, as measured when it decoded all.
        self.decode_cost: dict[str, float] = {}
        self.client: SchemaRegistryClient | None = None
        self.registry_file: Path | None = None
        if registry is not None:
            self.client = SchemaRegistryClient({"url": registry.url})
            self.registry_file = self.work / "registry.json"
            self.registry_file.write_text(json.dumps({"url": registry.url}))
            self.registry_file.chmod(0o600)

    def prepare_data(self) -> None:
        for dataset in (self.warm, self.full):
            start = time.perf_counter()
            path = dataset.parquet(self.args.partitions)
            dataset.partition_counts(self.args.partitions)
            print(
                f"dataset {dataset.rows:,} typed rows: {path} "
                f"({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
        self.full.read_through(self.args.partitions)  # in the page cache before round 1

    def sides(self) -> dict[str, Side]:
        return {name: (lambda rnd, n=name: self.export(rnd, n)) for name in self.args.systems}

    def _decoder(self, system: str, topic: str) -> Decode:
        value_format = VALUE_FORMATS[system]
        if value_format is None:
            return lambda value, _: from_json(json.loads(value))
        if value_format.get("schema_type") == "JSON":
            json_schema = JSONDeserializer(None, schema_registry_client=self.client)
            return lambda value, ctx: from_json(json_schema(value, ctx))
        if value_format.get("schema_type") == "PROTOBUF":
            assert self.client is not None
            return protobuf_decoder(self.client, f"{topic}-value")
        avro = AvroDeserializer(self.client)
        return lambda value, ctx: avro(value, ctx)

    def _source(self, system: str, data: TypedDataset) -> list[str]:
        """The prepare's source options: the parquet files, or for Protobuf a query over
        them turning the date into days (:data:`DAYS_SQL`)."""
        path = data.parquet(self.args.partitions)
        if VALUE_FORMATS[system] == {"schema_type": "PROTOBUF"}:
            return ["--source-sql", DAYS_SQL.format(path=path)]
        return ["--source-path", str(path), "--source-format", "parquet"]

    def _files(self, rnd: Round, system: str) -> tuple[str, Path]:
        slug = re.sub(r"[^a-z0-9]+", "-", system.lower()).strip("-")
        path = self.work / f"{rnd.label}-{slug}"
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return slug, path

    def export(self, rnd: Round, system: str) -> Run:
        """One export (prepare by spark-submit, then commit), verified."""
        data = self.warm if rnd.warmup else self.full
        slug, files = self._files(rnd, system)
        partitions = self.args.partitions
        topic = self.cluster.topic(f"{rnd.label}-{slug}", partitions)
        ids = [f"{topic}-{i}" for i in range(partitions)]
        manifest, events = files / "manifest.json", files / "events"
        arguments = [
            *self._source(system, data),
            *("--key-column", "key", "--topic", topic),
            *("--bootstrap-servers", self.cluster.servers),
            *("--transactional-ids", ",".join(ids), "--job-label", topic),
            *("--manifest", str(manifest)),
            *PARTITIONINGS[self.args.partitioning],
            *(("--writer", self.args.writer) if self.args.writer else ()),
        ]
        value_format = VALUE_FORMATS[system]
        if value_format is not None:
            arguments += ["--value-format", json.dumps(value_format)]
            arguments += ["--registry-config-file", str(self.registry_file)]
        jars = ",".join(str(j) for j in self.jars[system])
        conf = {**event_log_conf(events), "spark.jars": jars}
        others = [self.registry.pid] if self.registry and self.registry.pid else []
        with measure(self.cluster.broker_pid, exclude=others) as meter:
            started = now_ms()
            submitted = submit_prepare(
                arguments,
                master=self.master,
                conf=conf,
                log_path=files / "spark-submit.log",
                timeout_s=1800,
            )
            prepared_ms = now_ms()
            if submitted.returncode != 0:
                raise SystemExit(
                    f"{system}: the prepare failed (exit {submitted.returncode}); "
                    f"see {files / 'spark-submit.log'}"
                )
            committed = kafka2pc_commit(self.cluster.servers, manifest)
            ended = now_ms()
        if committed.returncode != 0:
            raise SystemExit(f"{system}: kafka2pc commit failed: {committed.stderr[-500:]}")
        batch = Manifest.from_json(manifest.read_text())
        meta = batch.metadata
        tasks = stage_cpu(events)
        parts = {
            "spark-submit (prepare)": (prepared_ms - started) / 1000,
            "in it: prepare_dataframe": (meta["finished_ms"] - meta["started_ms"]) / 1000,
            "kafka2pc commit": (ended - prepared_ms) / 1000,
            **timeline(events, started, prepared_ms),
            MAP_CPU: tasks.map_stages,
            WRITE_CPU: tasks.other_stages,
        }
        verification = self._verify(system, topic, data, batch, rnd)
        info = {
            "partitioning": meta.get("partitioning"),
            "writer": meta.get("writer"),
            "log_bytes": self.cluster.topic_bytes(topic),
            "shuffle_bytes": tasks.shuffle_bytes,
            "split_layout": (meta.get("source_splits") or {}).get("layout"),
        }
        self.cluster.delete_topics([topic])
        return Run(system, data.rows, meter, verification, parts, info)

    def _verify(
        self, system: str, topic: str, data: TypedDataset, batch: Manifest, rnd: Round
    ) -> WireVerification:
        counts = data.partition_counts(self.args.partitions)
        expected = Expected(
            data.rows, content=False, partition_counts=counts, committables=batch.committables
        )
        base = verify_topic(self.cluster, topic, expected)
        header = None
        if VALUE_FORMATS[system] is not None:
            assert self.client is not None
            schema_id = self.client.get_latest_version(f"{topic}-value").schema_id
            header = wire_header(schema_id)
            if VALUE_FORMATS[system] == {"schema_type": "PROTOBUF"}:
                header += FIRST_MESSAGE
        stride = 1
        if not self.args.decode_all:
            cost = self.decode_cost.get(system, float("nan"))
            stride = choose_stride(cost, data.rows, min(counts), self.args.decode_budget_s)
        values = check_values(
            self.cluster.config, topic, self._decoder(system, topic), header=header, stride=stride
        )
        if values.records != data.rows:
            values.problems.append(f"{values.records:,} values read of {data.rows:,}")
        if stride == 1 and values.decoded:
            self.decode_cost[system] = values.per_record_s
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
        fields["problems"] = [*base.problems, *values.problems]
        return WireVerification(**fields, values=values)


# -- the report --------------------------------------------------------------------------------


def _value_bytes(runs: list[Run]) -> float:
    return median([r.verification.values.value_bytes for r in runs])  # type: ignore[union-attr]


def _info_bytes(runs: list[Run], name: str) -> float:
    return median([r.info[name] for r in runs if r.info.get(name) is not None])


def print_bytes(results: Results, rows: int, say: Any = print) -> None:
    """Value bytes on the wire and the topic's log bytes on disk, per system (medians)."""
    json_bytes = _value_bytes(results.runs[JSON_VALUES]) if JSON_VALUES in results.runs else None
    table = []
    for side in results.sides:
        runs = results.runs[side]
        value_bytes, log_bytes = _value_bytes(runs), _info_bytes(runs, "log_bytes")
        table.append(
            [
                side,
                fmt(value_bytes, ",.0f"),
                fmt(value_bytes / rows, ".1f"),
                fmt(value_bytes / json_bytes, ".3f") if json_bytes else "-",
                fmt(log_bytes, ",.0f"),
                fmt(log_bytes / rows, ".1f"),
                fmt(_info_bytes(runs, "shuffle_bytes"), ",.0f"),
            ]
        )
    say(
        f"\nbytes on the wire ({rows:,} values; the keys are the same 16 B for every system), "
        "on the broker's disk, and through Spark's shuffle (compressed):"
    )
    headers = ["system", "value B", "B/value", "/ JSON", "log B on disk", "log B/record"]
    headers.append("Spark shuffle B")
    print_table(headers, table, say)


def print_decoding(results: Results, say: Any = print) -> None:
    """How each system's values were checked (all decoded, or a sample) and what a decode
    costs in Python."""
    say("\nvalues decoded in Python (not timed; a consumer's cost, not the export's):")
    for side in results.sides:
        for run in results.runs[side][-1:]:
            values = run.verification.values  # type: ignore[union-attr]
            which = (
                "all" if values.stride == 1 else f"a sample: the ids divisible by {values.stride}"
            )
            say(
                f"  {side}: {values.decoded:,} of {values.records:,} decoded ({which}); "
                f"{values.per_record_s * 1e6:.1f} us a value"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=8, help="Kafka = Spark partitions")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup-rows", type=int, default=200_000)
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument(
        "--writer", help="the prepare's --writer for every system (default: the package's)"
    )
    parser.add_argument(
        "--partitioning",
        choices=list(PARTITIONINGS),
        default="default",
        help="aligned (--align-with-kafka), hash (--no-align-with-kafka), source "
        "(--no-shuffle), or default: no option, the package's default",
    )
    parser.add_argument(
        "--decode-budget-s",
        type=float,
        default=60.0,
        help="decode every value of a run when that takes less (at the warm-up's cost), "
        "else a deterministic sample",
    )
    parser.add_argument("--decode-all", action="store_true", help="always decode every value")
    add_subset_argument(parser, "--systems", SYSTEMS)
    add_cluster_arguments(parser)
    args = parser.parse_args(argv)
    args.systems = parse_subset(parser, args.systems, SYSTEMS, "--systems")

    # A SIGTERM unwinds like Ctrl-C: the broker and the registry are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    fetch_kafka(args.kafka_version)
    avro = avro_jars()
    jars = {system: system_jars(system, avro) for system in args.systems}
    with ExitStack() as stack:
        cluster = stack.enter_context(Cluster.from_args(args, data_dir=WORK_DIR / "kafka"))
        registry = None
        if any(VALUE_FORMATS[s] is not None for s in args.systems):
            registry = stack.enter_context(schema_registry(WORK_DIR / "registry"))
            print(
                f"schema registry at {registry.url} (pid {registry.pid}) after "
                f"{registry.start_seconds:.1f} s (once, in no export's time or CPU)",
                flush=True,
            )
        bench = WireBench(args, cluster, registry, jars)
        bench.prepare_data()
        print(
            f"{cluster.describe()}; {args.rows:,} rows, {args.partitions} partitions, "
            f"{args.rounds} rounds + warm-up ({bench.warm.rows:,} rows), {bench.master}, "
            f"partitioning {args.partitioning}, writer {args.writer or 'default'}; "
            f"{machine_line()}",
            flush=True,
        )
        results = interleave(bench.sides(), args.rounds, say=lambda s: print(s, flush=True))

    print(
        "\nverification (log audit, read_committed per partition, every value's header, "
        "values decoded and compared with the source's rows):"
    )
    ok = print_verification(results)
    if not ok:
        print("NOT VERIFIED: the times below are not comparable")
    layouts = {(r.info["partitioning"], r.info["writer"]) for r in results.all_runs()}
    if len(layouts) != 1:
        ok = False
        print(f"NOT COMPARABLE: the systems differ in (partitioning, writer): {sorted(layouts)}")
    splits, recorded = same_splits(results.all_runs())
    if not splits:
        ok = False
        print("NOT COMPARABLE: the systems' source splits differ (the manifests' layouts)")
    same, counts = same_partition_counts(results.all_runs()[len(results.warmups) :])
    ok = ok and same
    (partitioning, writer), *_ = layouts
    base = JSON_VALUES if JSON_VALUES in results.sides else None
    pairs = [(s, base) for s in results.sides if base and s != base]
    title = (
        f"{args.rows:,} rows, {args.partitions} partitions, {bench.master}, "
        f"partitioning {partitioning}, writer {writer}"
    )
    legend = [f"{s}: {LEGEND[s]}" for s in results.sides]
    print_results(results, title, pairs, METRICS, legend=legend, verification=False)
    print_bytes(results, args.rows)
    print_decoding(results)
    print(f"per-partition counts equal across the systems: {'yes' if same else 'NO'} ({counts})")
    if recorded:
        print(
            "Spark partitions (the source splits each read, from the manifests) equal across "
            f"the systems: {'yes' if splits else 'NO'}"
        )
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(json.dumps({"verified": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
