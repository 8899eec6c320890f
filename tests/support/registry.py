"""A real schema registry for the tests: Apicurio Registry 2.4.2 (Confluent-compatible API).

Built once from Maven Central with ``devtools/registry/build.sh`` (about 3 minutes the
first time) into ``~/.cache/kafka2pc/registry-2.4.2.Final``, then started per session on a
free loopback port and stopped by its own PID. Its Confluent API is at
``/apis/ccompat/v7``; storage is in memory, so every session starts empty.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from devtools.broker.node import free_port

VERSION = "2.4.2.Final"
SOURCE = Path(__file__).resolve().parents[2] / "devtools" / "registry"
HOME = Path(os.environ.get("KAFKA2PC_CACHE", Path.home() / ".cache" / "kafka2pc"))
BUILD = HOME / f"registry-{VERSION}"
RUNNER = BUILD / "target" / "quarkus-app" / "quarkus-run.jar"
API = "/apis/ccompat/v7"


def build(timeout_s: float = 900) -> Path:
    """The runnable jar, built first if it is not in the cache (one builder at a time)."""
    HOME.mkdir(parents=True, exist_ok=True)
    with (HOME / f"registry-{VERSION}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if RUNNER.exists():
            return RUNNER
        BUILD.mkdir(parents=True, exist_ok=True)
        for name in ("pom.xml", "build.sh"):
            shutil.copy2(SOURCE / name, BUILD / name)
        shutil.copytree(SOURCE / "src", BUILD / "src", dirs_exist_ok=True)
        with (BUILD / "build.log").open("w") as log:
            subprocess.run(
                ["bash", str(BUILD / "build.sh")],
                cwd=BUILD,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=timeout_s,
            )
        if not RUNNER.exists():
            raise RuntimeError(f"the registry build made no {RUNNER}; see {BUILD / 'build.log'}")
        return RUNNER


@contextmanager
def running_registry(log_dir: Path, timeout_s: float = 120) -> Iterator[str]:
    """A registry on a free loopback port; yields its Confluent-compatible API URL."""
    jar = build()
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log = (log_dir / "registry.log").open("w")
    process = subprocess.Popen(
        [
            "java",
            "-Xmx256m",
            "-Dquarkus.http.host=127.0.0.1",
            f"-Dquarkus.http.port={port}",
            "-jar",
            str(jar),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}{API}"
    try:
        _wait_ready(url, process, timeout_s)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()


def _wait_ready(url: str, process: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the registry exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/subjects", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the registry did not answer at {url} within {timeout_s} s")


def protobuf_message(
    package: str, name: str, fields: list[tuple[str, int, int]], *extra: str
) -> Any:
    """A message class built by hand (not by the code under test) for confluent-kafka's
    ProtobufDeserializer: ``fields`` are (name, number, FieldDescriptorProto type); ``extra``
    messages come first in the file. A reader needs no more fields than it checks."""
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message_factory import GetMessageClass

    proto = descriptor_pb2.FileDescriptorProto(
        name=f"{uuid.uuid4().hex}.proto", package=package, syntax="proto3"
    )
    for other in extra:
        proto.message_type.add(name=other)
    message = proto.message_type.add(name=name)
    for field_name, number, kind in fields:
        message.field.add(name=field_name, number=number, type=kind, label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}".lstrip(".")))
