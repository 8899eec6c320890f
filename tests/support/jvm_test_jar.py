"""The tests' own jar: the JVM writer's fault hook and a PartitionTransaction harness.

Built on first use from ``jvm/test-src`` with the JDK's ``javac`` (as ``jvm/build.sh``
builds the product jar), against the product jar, kafka-clients and PySpark's jars, into
``<cache>/test-jars/kafka2pc-test-<digest>.jar``: the digest covers the test sources and
the product jar, so either changing rebuilds it, and a lock lets concurrent processes (a
fault test's Airflow child, pytest-xdist workers) share one build. Nothing here is in the
product jar or the wheel (tests/integration/test_wheel.py checks).

- :data:`FAULT_HOOK` (``jvm/test-src/kafka2pc/faults/Fault.java``): a
  ``kafka2pc.spark.WriterHook``, named in the product's :data:`HOOK_PROPERTY` as
  :func:`fault_hook` writes it. The session must have :func:`jvm_test_jar` on its class path
  (``spark.jars``, ``--jars`` or ``ADD JAR``) beside the product jar.
- :data:`HARNESS` (``jvm/test-src/kafka2pc/spark/TransactionHarness.java``): one
  ``PartitionTransaction`` driven outside Spark, in a JVM of its own (:func:`run_harness`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pyspark

from airflow_provider_kafka2pc.spark import PROJECT_JAR
from airflow_provider_kafka2pc.spark.jvm_writer import HOOK_PROPERTY, kafka_clients_jar
from airflow_provider_kafka2pc.spark.maven import cache_root, java_binary

__all__ = [
    "FAULT_HOOK",
    "HARNESS",
    "HOOK_PROPERTY",
    "fault_hook",
    "jvm_test_jar",
    "not_product_classes",
    "run_harness",
    "run_harness_many",
]

JVM = Path(__file__).resolve().parents[2] / "jvm"
SOURCES = JVM / "test-src"
FAULT_HOOK = "kafka2pc.faults.Fault"
HARNESS = "kafka2pc.spark.TransactionHarness"
SPARK_JARS = Path(pyspark.__file__).parent / "jars"


def fault_hook(fault: str) -> str:
    """The hook property's value for :data:`FAULT_HOOK` with ``fault``
    (``partition,rows,attempts,die|fail|halt|late[,marker]``)."""
    return f"{FAULT_HOOK}:{fault}"


def not_product_classes(names: list[str]) -> list[str]:
    """The class files among a jar's entry ``names`` that no ``jvm/src`` source compiles to
    (a test class, a stale class): each ``a/b/C.class`` or ``a/b/C$Inner.class`` must come
    from ``jvm/src/a/b/C.java``, and no test source may share its name."""
    product = {p.relative_to(JVM / "src").with_suffix("").as_posix() for p in _java("src")}
    tests = {p.relative_to(SOURCES).with_suffix("").as_posix() for p in _java("test-src")}
    outer = {n: n.removesuffix(".class").split("$")[0] for n in names if n.endswith(".class")}
    return sorted(n for n, top in outer.items() if top not in product or top in tests)


def _java(root: str) -> list[Path]:
    return sorted((JVM / root).rglob("*.java"))


def jvm_test_jar() -> Path:
    """The test jar, built once per digest of its sources and the product jar."""
    sources = sorted(SOURCES.rglob("*.java"))
    digest = hashlib.sha256()
    for path in [*sources, Path(PROJECT_JAR)]:
        digest.update(path.read_bytes())
    home = cache_root() / "test-jars"
    jar = home / f"kafka2pc-test-{digest.hexdigest()[:16]}.jar"
    if jar.exists():
        return jar
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not jar.exists():
            _build(sources, jar)
    return jar


def _build(sources: list[Path], jar: Path) -> None:
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("the tests' jar needs a JDK's javac (Debian: openjdk-17-jdk-headless)")
    classpath = os.pathsep.join([PROJECT_JAR, str(kafka_clients_jar()), f"{SPARK_JARS}/*"])
    with tempfile.TemporaryDirectory(prefix="kafka2pc-test-jar-") as work:
        classes = Path(work) / "classes"
        command = [javac, "--release", "17", "-Xlint:all,-path", "-Werror", "-cp", classpath]
        _run([*command, "-d", str(classes), *map(str, sources)])
        staged = Path(work) / jar.name
        _run([str(Path(javac).with_name("jar")), "--create", "--file", str(staged),
              "-C", str(classes), "."])  # fmt: skip
        os.replace(shutil.copy(staged, jar.with_suffix(".tmp")), jar)


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed: {done.stderr[-3000:] or done.stdout[-3000:]}")


def run_harness(scenario: dict[str, Any], timeout_s: float = 120) -> dict[str, Any]:
    """Run :data:`HARNESS` on ``scenario`` in a JVM of its own: its answer,
    and under ``stderr`` what the JVM logged (the writer's own lines among them)."""
    return run_harness_many([scenario], timeout_s)[0]


def run_harness_many(scenarios: list[dict[str, Any]], timeout_s: float = 120) -> list[dict]:
    """:func:`run_harness` of each of ``scenarios``, one after another in one JVM; each
    answer's ``stderr`` is the whole JVM's."""
    classpath = os.pathsep.join(
        [PROJECT_JAR, str(jvm_test_jar()), str(kafka_clients_jar()), f"{SPARK_JARS}/*"]
    )
    done = subprocess.run(
        [java_binary(), "-cp", classpath, HARNESS],
        input=json.dumps(scenarios),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{HARNESS} exited with {done.returncode}: {done.stderr[-3000:]}")
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    return [{**answer, "stderr": done.stderr} for answer in answers]
