#!/usr/bin/env bash
# Builds airflow_provider_kafka2pc/spark/jars/kafka2pc-spark.jar from jvm/src with the JDK's
# javac, against the jars that pyspark ships (provided at run time by Spark itself) and
# kafka-clients and protobuf-java (fetched into the cache once, added at run time: see
# airflow_provider_kafka2pc/spark/jvm_writer.py). The jar is committed, so users need no JDK; its manifest carries the
# SHA-256 of the sources it was built from, and a test fails when they drift apart; CI
# rebuilds it and compares (jvm/check.py). Only jvm/src goes in: the tests' Java
# (jvm/test-src: fault hooks, the PartitionTransaction harness) is built into a test jar of
# its own by the tests (tests/support/test_jar.py), so nothing here can name it.
# Usage: jvm/build.sh [python [out]]   (python: the interpreter whose pyspark to compile
# against; out: the jar to write, by default the committed one)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-.venv/bin/python}
jars=$("$python" -c 'import pathlib, pyspark; print(pathlib.Path(pyspark.__file__).parent / "jars")')
clients=$("$python" -c 'from airflow_provider_kafka2pc.spark.jvm_writer import kafka_clients_jar; print(kafka_clients_jar())')
protobuf=$("$python" -c 'from airflow_provider_kafka2pc.spark import PROTOBUF_JAVA; from airflow_provider_kafka2pc.spark.maven import fetch_jar; print(fetch_jar(PROTOBUF_JAVA))')
out=${2:-airflow_provider_kafka2pc/spark/jars/kafka2pc-spark.jar}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# C order: the order tests/unit/spark/test_alignment.py digests them in.
sources=$(find jvm/src -name '*.java' | LC_ALL=C sort)
digest=$(cat $sources | sha256sum | cut -d' ' -f1)
# Release 17: Spark 4 needs Java 17 or newer.
javac --release 17 -Xlint:all,-path -Werror -cp "$jars/*:$clients:$protobuf" -d "$work/classes" $sources
printf 'Kafka2pc-Source-SHA256: %s\n' "$digest" > "$work/manifest.txt"
# The DataSource V2 sink's short name, format("kafka2pc"): Spark finds it by ServiceLoader.
mkdir -p "$work/classes/META-INF/services"
echo kafka2pc.spark.Kafka2pcSource > "$work/classes/META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
# A fixed date and entry order (JDK 17's jar lists a directory in the file system's order):
# the same sources and JDK give the same jar bytes.
target=$(realpath -m "$out")
entries=$(cd "$work/classes" && find . -mindepth 1 | LC_ALL=C sort | sed 's|^\./||')
(cd "$work/classes" && jar --create --date=2026-01-01T00:00:00Z --file "$target" \
    --manifest "$work/manifest.txt" $entries)
echo "built $out from $(echo $sources | wc -w) source(s), sha256 $digest"
