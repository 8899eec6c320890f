"""Keys land on the partition a Java client would choose, proven by running Java itself.

Java's producer (and so Spark's own Kafka sink) puts a keyed record on
``BuiltInPartitioner.partitionForKey(key, n)`` = ``toPositive(murmur2(key)) % n``.
librdkafka's default partitioner (consistent_random, CRC32) does not, so the writer
defaults to murmur2_random. Java's choice comes from Kafka's own classes in the broker's
jars; where the records landed comes from the log (raw batches, read by our LogReader).
"""

from __future__ import annotations

import random
import subprocess
from collections.abc import Callable, Iterable

import pytest
from pyspark.sql import SparkSession

from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.spark import prepare_dataframe
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from airflow_provider_kafka2pc.transaction.log import LogReader
from airflow_provider_kafka2pc.transaction.writer import DEFAULT_PARTITIONER, TransactionalWriter
from devtools.broker import DEFAULT_KAFKA_VERSION, fetch_kafka
from devtools.broker.distribution import java_binary
from tests.conftest import assert_exactly_once, unique_id
from tests.support.spark import local_session

#: Reads hex keys (one a line) and prints, per key, Java's partition for each count in
#: argv. It checks that the producer's method is the murmur2 formula it is said to be.
JAVA_SOURCE = """\
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.HexFormat;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.utils.Utils;

public class JavaPartitioner {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        String line;
        while ((line = in.readLine()) != null) {
            byte[] key = HexFormat.of().parseHex(line.trim());
            StringBuilder out = new StringBuilder();
            for (String arg : args) {
                int n = Integer.parseInt(arg);
                int chosen = BuiltInPartitioner.partitionForKey(key, n);
                if (chosen != Utils.toPositive(Utils.murmur2(key)) % n) {
                    throw new IllegalStateException("partitionForKey is not murmur2");
                }
                out.append(out.length() == 0 ? "" : " ").append(chosen);
            }
            System.out.println(out);
        }
    }
}
"""

COUNTS = (6, 7)

#: Partition of each key, by partition count.
JavaChoice = Callable[[Iterable[bytes]], dict[int, dict[bytes, int]]]


@pytest.fixture(scope="module")
def java_choice(tmp_path_factory: pytest.TempPathFactory) -> JavaChoice:
    """Ask a JVM running Kafka's own client classes where each key goes."""
    source = tmp_path_factory.mktemp("java") / "JavaPartitioner.java"
    source.write_text(JAVA_SOURCE)
    lib = fetch_kafka(DEFAULT_KAFKA_VERSION)

    known: dict[bytes, tuple[int, ...]] = {}  # one JVM start for many questions

    def choose(keys: Iterable[bytes]) -> dict[int, dict[bytes, int]]:
        wanted = set(keys)
        ask = sorted(wanted - known.keys())
        if ask:
            done = subprocess.run(
                [java_binary(), "-cp", str(lib / "*"), str(source), *map(str, COUNTS)],
                input="".join(k.hex() + "\n" for k in ask),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, (
                "running Kafka's partitioner in Java failed (a single-file source launch "
                f"needs a JDK's compiler, e.g. openjdk-17-jdk-headless): {done.stderr[-2000:]}"
            )
            rows = done.stdout.splitlines()
            assert len(rows) == len(ask), done.stdout[-2000:]
            known.update(
                (k, tuple(map(int, row.split()))) for k, row in zip(ask, rows, strict=True)
            )
        return {n: {k: known[k][i] for k in wanted} for i, n in enumerate(COUNTS)}

    return choose


def sample_keys(count: int = 300) -> list[bytes]:
    """Keys of the kinds users have: ids, text with non-ASCII, raw bytes, the empty key."""
    rng = random.Random(939)
    keys = {b"", b"0", b"order-1"}
    while len(keys) < count:
        kind = len(keys) % 3
        if kind == 0:
            keys.add(b"%d" % rng.randrange(10**12))
        elif kind == 1:
            keys.add(f"kunde-{rng.randrange(10**6)}-größe-注文".encode())
        else:
            keys.add(rng.randbytes(rng.randrange(1, 40)))
    return sorted(keys)


def landed(protocol: KafkaProtocol, topic: str) -> dict[bytes, int]:
    """Each keyed record's partition, as the log holds it (control batches skipped)."""
    reader = LogReader(protocol)
    where: dict[bytes, int] = {}
    for partition in reader.partitions(topic):
        for batch in reader.batches(topic, partition, with_keys=True):
            if batch.control is None:
                for key in batch.keys:
                    assert key is not None and key not in where, key
                    where[key] = partition
    return where


def write_and_commit(settings, protocol, topic: str, keys: list[bytes], **config):
    committable = TransactionalWriter({**settings, **config}, unique_id("part")).write(
        topic, ((key, b"value") for key in keys)
    )
    assert TransactionController(protocol).commit(committable).outcome is Outcome.COMMITTED
    return committable


def mismatches(chosen: dict[bytes, int], actual: dict[bytes, int]) -> dict[bytes, tuple]:
    return {k: (chosen[k], p) for k, p in actual.items() if chosen[k] != p}


@pytest.mark.parametrize("partitions", COUNTS)
def test_writer_puts_each_key_where_java_would(
    settings, bootstrap, protocol, make_topic, java_choice, partitions
):
    keys = sample_keys()
    topic = make_topic(partitions)
    committable = write_and_commit(settings, protocol, topic, keys)
    actual = landed(protocol, topic)
    assert sorted(actual) == keys
    assert len(set(actual.values())) == partitions  # the keys spread over every partition
    assert mismatches(java_choice(keys)[partitions], actual) == {}
    assert_exactly_once(protocol, bootstrap, topic, committable, committed=len(keys), aborted=0)


def test_a_partitioner_the_user_sets_is_kept(
    settings, bootstrap, protocol, make_topic, java_choice
):
    """librdkafka's own default really differs from Java: the test above can fail."""
    assert DEFAULT_PARTITIONER == "murmur2_random"
    keys = sample_keys()
    topic = make_topic(7)
    committable = write_and_commit(settings, protocol, topic, keys, partitioner="consistent_random")
    wrong = mismatches(java_choice(keys)[7], landed(protocol, topic))
    assert len(wrong) > len(keys) // 2, wrong  # about 6 in 7 by chance
    assert_exactly_once(protocol, bootstrap, topic, committable, committed=len(keys), aborted=0)


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    yield from local_session()


def test_spark_prepare_puts_each_key_where_java_would(
    spark, settings, bootstrap, protocol, make_topic, java_choice
):
    """The same through ``prepare_dataframe``: Spark encodes the keys, librdkafka places them."""
    df = spark.range(300).selectExpr(
        "CASE WHEN id % 2 = 0 THEN CAST(id * 7919 AS STRING) "
        "ELSE concat('kunde-', id, '-größe') END AS customer",
        "id",
    )
    for partitions in COUNTS:
        topic = make_topic(partitions)
        run = unique_id("run")
        batch = prepare_dataframe(
            df,
            topic=topic,
            transactional_ids=[f"{run}-{i}" for i in range(2)],
            producer_config=settings,
            key_column="customer",
        )
        results = TransactionController(protocol).commit_all(batch.committables)
        assert {r.outcome for r in results} == {Outcome.COMMITTED}
        actual = landed(protocol, topic)
        assert len(actual) == 300
        assert len(set(actual.values())) == partitions
        assert mismatches(java_choice(actual)[partitions], actual) == {}
        assert_exactly_once(protocol, bootstrap, topic, *batch.committables, committed=300)
