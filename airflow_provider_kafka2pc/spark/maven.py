"""Jars from Maven Central, fetched at run time with Apache Ivy into the kafka2pc cache.

The JVM writer needs kafka-clients on the executors (:mod:`.jvm_writer`); a user's machine
must not need Maven for that. PySpark ships Ivy (``pyspark/jars/ivy-*.jar``) to resolve
``--packages``; it resolves Maven coordinates with the Java Spark runs on anyway. Only what
such a fetch needs lives here: where the cache is, which Java and Ivy run, which repository
answers. (The repository's developer tools fetch Apache Kafka's broker with the same.)
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path
from xml.sax.saxutils import quoteattr

from ..errors import ConfigurationError

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
