"""Fetch Apache Kafka's broker jars from Maven Central once per version, with Apache Ivy.

The cache, the Java, the Ivy jar and the repository are the product's
(:mod:`airflow_provider_kafka2pc.spark.maven`, which fetches the JVM writer's kafka-clients);
re-exported here so that the broker's callers need one module. The jars land in
``<cache>/kafka-<version>/lib`` through a temporary directory and a rename, under a file lock,
so a half-finished or concurrent fetch is never used.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from xml.sax.saxutils import quoteattr

from airflow_provider_kafka2pc.errors import BrokerFetchError, ConfigurationError
from airflow_provider_kafka2pc.spark.maven import (
    CACHE_ENV,
    IVY_JAR_ENV,
    MAVEN_CENTRAL,
    REPOSITORY_ENV,
    cache_root,
    ivy_jar,
    ivy_settings,
    java_binary,
    repository,
)

from .version import DEFAULT_KAFKA_VERSION

__all__ = [
    "CACHE_ENV",
    "DEFAULT_KAFKA_VERSION",
    "IVY_JAR_ENV",
    "MAVEN_CENTRAL",
    "REPOSITORY_ENV",
    "cache_root",
    "fetch_kafka",
    "ivy_jar",
    "java_binary",
    "kafka_home",
    "major",
    "repository",
]

_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


def major(version: str) -> int:
    return int(version.split(".", 1)[0])


def _slf4j_binding(version: str) -> tuple[str, str, str]:
    """The logging binding Kafka's POM leaves out: log4j 2 from 4.0, reload4j before."""
    if major(version) >= 4:
        return ("org.apache.logging.log4j", "log4j-slf4j-impl", "2.24.3")
    return ("org.slf4j", "slf4j-reload4j", "1.7.36")


def _ivy_module(version: str) -> str:
    deps = [("org.apache.kafka", "kafka_2.13", version), _slf4j_binding(version)]
    lines = "\n".join(
        f"    <dependency org={quoteattr(o)} name={quoteattr(n)} rev={quoteattr(r)} "
        'conf="default->default"/>'
        for o, n, r in deps
    )
    return (
        '<ivy-module version="2.0">\n'
        '  <info organisation="kafka2pc" module="kafka-broker"/>\n'
        f"  <dependencies>\n{lines}\n  </dependencies>\n</ivy-module>\n"
    )


def kafka_home(version: str, cache_dir: Path | None = None) -> Path:
    return (cache_dir or cache_root()) / f"kafka-{version}"


def fetch_kafka(
    version: str = DEFAULT_KAFKA_VERSION, cache_dir: Path | None = None, timeout_s: float = 600
) -> Path:
    """Return the directory of Apache Kafka ``version``'s jars, fetching them on first use."""
    if not _VERSION.match(version):
        raise ConfigurationError(f"Kafka version {version!r} is not of the form 4.4.0")
    home = kafka_home(version, cache_dir)
    lib = home / "lib"
    if (home / ".complete").exists():
        return lib
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f".kafka-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / ".complete").exists():  # another process fetched it meanwhile
            return lib
        staging = Path(tempfile.mkdtemp(prefix=f".kafka-{version}-", dir=home.parent))
        try:
            _resolve(version, staging, home.parent / "ivy-cache", timeout_s)
            (staging / ".complete").write_text(version + "\n")
            shutil.rmtree(home, ignore_errors=True)
            staging.rename(home)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return lib


def _resolve(version: str, target: Path, ivy_cache: Path, timeout_s: float) -> None:
    module = target / "ivy.xml"
    module.write_text(_ivy_module(version))
    settings = target / "ivysettings.xml"
    settings.write_text(ivy_settings(repository()))
    command = [
        java_binary(),
        "-jar",
        ivy_jar(),
        "-settings",
        str(settings),
        "-ivy",
        str(module),
        "-cache",
        str(ivy_cache),
        "-confs",
        "default",
        "-retrieve",
        str(target / "lib" / "[artifact]-[revision](-[classifier]).[ext]"),
    ]
    where = f"Apache Kafka {version} into {target.parent / f'kafka-{version}'}"
    source = repository()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        raise BrokerFetchError(
            f"fetching {where} from {source} took over {timeout_s:.0f} s"
        ) from None
    jars = list((target / "lib").glob(f"kafka_2.13-{version}.jar"))
    if done.returncode != 0 or not jars:
        raise BrokerFetchError(
            f"could not fetch {where} from {source}: {_diagnose(source, version)}. "
            f"Check that the version exists ({source}org/apache/kafka/kafka_2.13/) and that "
            f"this machine reaches the repository (set {REPOSITORY_ENV} to use a mirror)"
        )


def _diagnose(source: str, version: str) -> str:
    """Ivy says "not found" for a missing version and an unreachable repository alike."""
    pom = f"{source}org/apache/kafka/kafka_2.13/{version}/kafka_2.13-{version}.pom"
    try:
        with urllib.request.urlopen(urllib.request.Request(pom, method="HEAD"), timeout=15):
            return "Ivy could not resolve its dependencies"
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return f"there is no Apache Kafka {version} ({pom} answers 404)"
        return f"{pom} answers HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"the repository is unreachable ({reason})"
