"""Jars from Maven Central, fetched at run time with Apache Ivy into the kafka2pc cache.

The JVM writer needs kafka-clients on the executors (:mod:`.jvm_writer`), registry Avro on
a Spark Connect server Spark's spark-avro (:mod:`.connect_artifacts`); a user's machine
must not need Maven for that. PySpark ships Ivy (``pyspark/jars/ivy-*.jar``) to resolve
``--packages``; it resolves Maven coordinates with the Java Spark runs on anyway. Only what
such a fetch needs lives here: where the cache is, which Java and Ivy run, which repository
answers. (The repository's developer tools fetch Apache Kafka's broker with the same.)
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from xml.sax.saxutils import quoteattr

from ..errors import BrokerFetchError, ConfigurationError

#: Where jars are cached: $KAFKA2PC_CACHE_DIR, else $XDG_CACHE_HOME/kafka2pc, else ~/.cache.
CACHE_ENV = "KAFKA2PC_CACHE_DIR"
#: An Ivy jar to use instead of PySpark's.
IVY_JAR_ENV = "KAFKA2PC_IVY_JAR"
#: A Maven repository root to use instead of Maven Central (a mirror or proxy).
REPOSITORY_ENV = "KAFKA2PC_MAVEN_REPOSITORY"

MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"


def cache_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafka2pc"


def java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").exists():
        return str(Path(home, "bin", "java"))
    found = shutil.which("java")
    if found is None:
        raise ConfigurationError(
            "Apache Kafka needs a Java 17+ runtime: install one (Debian: "
            "openjdk-17-jre-headless) or set JAVA_HOME"
        )
    return found


def ivy_jar() -> str:
    if os.environ.get(IVY_JAR_ENV):
        return os.environ[IVY_JAR_ENV]
    try:
        import pyspark
    except ImportError:
        raise ConfigurationError(
            "fetching Apache Kafka needs Apache Ivy, which comes with PySpark: "
            "pip install 'airflow-provider-kafka2pc[spark]', or set "
            f"{IVY_JAR_ENV} to an ivy jar"
        ) from None
    jars = sorted(glob.glob(str(Path(pyspark.__file__).parent / "jars" / "ivy-*.jar")))
    if not jars:
        raise ConfigurationError(f"no ivy-*.jar in PySpark's jars; set {IVY_JAR_ENV}")
    return jars[-1]


def repository() -> str:
    return os.environ.get(REPOSITORY_ENV) or MAVEN_CENTRAL


def ivy_settings(root: str) -> str:
    """Ivy's settings file: one Maven-layout resolver at ``root``."""
    return (
        "<ivysettings>\n"
        '  <settings defaultResolver="maven"/>\n'
        f'  <resolvers><ibiblio name="maven" m2compatible="true" root={quoteattr(root)}/>'
        "</resolvers>\n"
        "</ivysettings>\n"
    )


def fetch_jar(coordinates: str, cache_dir: Path | None = None, timeout_s: float = 300) -> Path:
    """The jar of ``group:name:version`` (without its dependencies), fetched once with
    Apache Ivy into ``<cache>/<name>-<version>/<name>-<version>.jar``."""
    _group, name, version = coordinates.split(":")
    home = (cache_dir or cache_root()) / f"{name}-{version}"
    jar = home / f"{name}-{version}.jar"
    if jar.exists():
        return jar
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f".{name}-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if jar.exists():
            return jar
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=home.parent))
        try:
            _retrieve(coordinates, staging, home.parent / "ivy-cache", timeout_s)
            shutil.rmtree(home, ignore_errors=True)
            staging.rename(home)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return jar


def _retrieve(coordinates: str, target: Path, ivy_cache: Path, timeout_s: float) -> None:
    settings = target / "ivysettings.xml"
    settings.write_text(ivy_settings(repository()))
    group, name, version = coordinates.split(":")
    command = [
        java_binary(),
        "-jar",
        ivy_jar(),
        "-settings",
        str(settings),
        "-cache",
        str(ivy_cache),
        "-dependency",
        group,
        name,
        version,
        "-notransitive",
        "-confs",
        "default",
        "-retrieve",
        str(target / "[artifact]-[revision].[ext]"),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise BrokerFetchError(f"fetching {coordinates} took over {timeout_s:.0f} s") from None
    if done.returncode != 0 or not (target / f"{name}-{version}.jar").exists():
        raise BrokerFetchError(
            f"could not fetch {coordinates} from {repository()} (set {REPOSITORY_ENV} to "
            f"use a mirror, or start Spark with --packages {coordinates}): "
            f"{done.stderr.strip()[-300:] or done.stdout.strip()[-300:]}"
        )
