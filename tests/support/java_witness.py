"""A witness nobody here wrote: Apache Kafka's own Java console consumer, read_committed.

``org.apache.kafka.tools.consumer.ConsoleConsumer --isolation-level read_committed`` from
``org.apache.kafka:kafka-tools:4.3.1`` (4.4.0 is not on Maven Central; 4.3.1's own jars,
its whole runtime closure, talk to a 4.4.0 broker fine). The jars are fetched once with
Apache Ivy (as :mod:`devtools.broker.distribution` fetches the broker)
into ``<cache>/kafka-tools-4.3.1``. It reads the topic from the beginning and exits once
no record came for ``idle_ms``; every record is printed as ``partition<TAB>key``, and its
own "Processed a total of N messages" is checked against the lines.

Security settings (librdkafka's names, as the ``kafka`` connection holds them) become a
Java properties file of mode 600, removed afterwards: PEM truststore and keystore, SASL's
JAAS line. Only the file's path is on the command line.

    from tests.support.java_witness import java_read_committed
    seen = java_read_committed(bootstrap, topic)  # JavaView: records, per partition, keys
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

from devtools.broker.distribution import (
    cache_root,
    ivy_jar,
    java_binary,
    repository,
)

KAFKA_TOOLS = ("org.apache.kafka", "kafka-tools", "4.3.1")
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
_PROCESSED = re.compile(r"Processed a total of (\d+) messages")


@dataclass
class JavaView:
    """What Kafka's console consumer printed: records per partition and their keys."""

    topic: str
    counts: Counter[int] = field(default_factory=Counter)
    keys: Counter[str] = field(default_factory=Counter)
    processed: int = 0
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def duplicate_keys(self) -> int:
        return sum(n - 1 for key, n in self.keys.items() if key != "null" and n > 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "records": self.total,
            "processed": self.processed,
            "per_partition": dict(sorted(self.counts.items())),
            "duplicate_keys": self.duplicate_keys,
            "seconds": round(self.seconds, 1),
        }


def tools_lib() -> Path:
    """The directory of kafka-tools 4.3.1 and its runtime jars, fetched on first use."""
    org, name, rev = KAFKA_TOOLS
    home = cache_root() / f"{name}-{rev}"
    lib = home / "lib"
    if (home / ".complete").exists():
        return lib
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f".{name}-{rev}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / ".complete").exists():
            return lib
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-{rev}-", dir=home.parent))
        try:
            (staging / "ivy.xml").write_text(
                '<ivy-module version="2.0"><info organisation="kafka2pc" module="witness"/>'
                f"<dependencies><dependency org={quoteattr(org)} name={quoteattr(name)} "
                f'rev={quoteattr(rev)} conf="default->default"/></dependencies></ivy-module>\n'
            )
            (staging / "ivysettings.xml").write_text(
                '<ivysettings><settings defaultResolver="maven"/><resolvers><ibiblio '
                f'name="maven" m2compatible="true" root={quoteattr(repository())}/>'
                "</resolvers></ivysettings>\n"
            )
            done = subprocess.run(
                [
                    java_binary(),
                    "-jar",
                    ivy_jar(),
                    "-settings",
                    str(staging / "ivysettings.xml"),
                    "-ivy",
                    str(staging / "ivy.xml"),
                    "-cache",
                    str(home.parent / "ivy-cache"),
                    "-confs",
                    "default",
                    "-retrieve",
                    str(staging / "lib" / "[artifact]-[revision](-[classifier]).[ext]"),
                ],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if done.returncode != 0 or not (staging / "lib" / f"{name}-{rev}.jar").exists():
                raise RuntimeError(
                    f"could not fetch {':'.join(KAFKA_TOOLS)} from {repository()}: "
                    f"{(done.stdout + done.stderr)[-2000:]}"
                )
            (staging / ".complete").write_text(":".join(KAFKA_TOOLS) + "\n")
            shutil.rmtree(home, ignore_errors=True)
            staging.rename(home)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return lib


def _java_string(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def java_properties(settings: Mapping[str, Any], directory: Path) -> dict[str, str]:
    """librdkafka-style security settings as a Java client's properties."""
    props: dict[str, str] = {}
    protocol = str(settings.get("security.protocol", "PLAINTEXT")).upper()
    props["security.protocol"] = protocol
    if "ssl" in protocol.lower():
        if settings.get("ssl.ca.location"):
            props["ssl.truststore.type"] = "PEM"
            props["ssl.truststore.location"] = str(settings["ssl.ca.location"])
        if settings.get("ssl.certificate.location"):
            # A PEM keystore is one file: the private key, then the certificate chain.
            keystore = directory / "keystore.pem"
            fd = os.open(keystore, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(Path(settings["ssl.key.location"]).read_text())
                handle.write(Path(settings["ssl.certificate.location"]).read_text())
            props["ssl.keystore.type"] = "PEM"
            props["ssl.keystore.location"] = str(keystore)
            if settings.get("ssl.key.password"):
                props["ssl.key.password"] = str(settings["ssl.key.password"])
        if str(settings.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
            props["ssl.endpoint.identification.algorithm"] = ""
    if protocol.startswith("SASL"):
        mechanism = str(settings.get("sasl.mechanism") or settings.get("sasl.mechanisms"))
        props["sasl.mechanism"] = mechanism
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if mechanism == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        props["sasl.jaas.config"] = (
            f'{module} required username="{_java_string(str(settings["sasl.username"]))}" '
            f'password="{_java_string(str(settings["sasl.password"]))}";'
        )
    return props


@contextmanager
def _private_properties(settings: Mapping[str, Any] | None) -> Iterator[Path | None]:
    if not settings:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="kafka2pc-java-witness-") as directory:
        path = Path(directory) / "consumer.properties"
        props = java_properties(settings, Path(directory))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            for key, value in props.items():
                escaped = value.replace("\\", "\\\\")
                handle.write(f"{key}={escaped}\n")
        yield path


def java_read_committed(
    bootstrap: str,
    topic: str,
    *,
    settings: Mapping[str, Any] | None = None,
    idle_ms: int = 4000,
    timeout_s: float = 120.0,
) -> JavaView:
    """Read ``topic`` from the beginning with Kafka's ConsoleConsumer, read_committed."""
    lib = tools_lib()
    with _private_properties(settings) as properties:
        command = [
            java_binary(),
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-cp",
            str(lib / "*"),
            CONSOLE_CONSUMER,
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--from-beginning",
            "--isolation-level",
            "read_committed",
            "--timeout-ms",
            str(idle_ms),
            "--formatter-property",
            "print.partition=true",
            "--formatter-property",
            "print.key=true",
            "--formatter-property",
            "print.value=false",
            "--formatter-property",
            "key.separator=\t",
            *(["--command-config", str(properties)] if properties else []),
        ]
        began = time.monotonic()
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    view = JavaView(topic, seconds=time.monotonic() - began)
    processed = _PROCESSED.search(done.stderr)
    if processed is None:
        raise AssertionError(
            f"Kafka's console consumer did not finish (exit {done.returncode}): "
            f"{done.stderr[-3000:]}"
        )
    view.processed = int(processed.group(1))
    for line in done.stdout.splitlines():
        partition, _, key = line.partition("\t")
        if not partition.startswith("Partition:"):
            continue
        view.counts[int(partition.removeprefix("Partition:"))] += 1
        view.keys[key] += 1
    if view.total != view.processed:
        raise AssertionError(
            f"Kafka's console consumer processed {view.processed} records but printed "
            f"{view.total}: {done.stdout[-500:]}"
        )
    return view


def assert_java_witness(
    bootstrap: str,
    topic: str,
    *,
    committed: int,
    settings: Mapping[str, Any] | None = None,
    keys_unique: bool = True,
) -> JavaView:
    """The third witness agrees: exactly ``committed`` records, no key twice."""
    view = java_read_committed(bootstrap, topic, settings=settings)
    if view.processed == 0 and committed > 0:
        # The idle timeout counts from the consumer's start: on a loaded machine (load 18
        # on 2 cores, 2026-11-26) its first fetch came later than 4 s after a node's restart
        # and it printed nothing. Reading nothing at all gets one more, patient, try; any
        # other count is the witness's answer.
        view = java_read_committed(bootstrap, topic, settings=settings, idle_ms=20_000)
    assert view.total == committed, view.to_dict()
    if keys_unique:
        assert view.duplicate_keys == 0, view.to_dict()
    return view
