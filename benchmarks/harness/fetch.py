"""Fetching what a benchmark compares against, once, into ``~/.cache/kafka2pc/peers``.

Why here: a peer that cannot be had must be said plainly, and a half-finished fetch must
never be used. Jars come from Maven Central through the Apache Ivy that PySpark ships (the
same route as the package's broker fetch: no Maven needed); Python packages into a
virtualenv of their own through pip. Each lands in a directory that gets a ``.complete``
marker only when the fetch succeeded.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from xml.sax.saxutils import quoteattr

from devtools.broker import cache_root
from devtools.broker.distribution import ivy_jar, java_binary, repository


class PeerUnavailable(RuntimeError):
    """A peer could not be fetched; the message says which and why."""


def peers_root() -> Path:
    return cache_root() / "peers"


@contextmanager
def _once(name: str) -> Iterator[tuple[Path, bool]]:
    """``(directory, ready)`` under a lock; the caller fills a new directory when not ready."""
    root = peers_root()
    root.mkdir(parents=True, exist_ok=True)
    target = root / name
    with open(root / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield target, (target / ".complete").exists()


def maven_jars(name: str, coordinates: Sequence[str], *, transitive: bool = True) -> list[Path]:
    """The jars of ``group:artifact:version`` coordinates (with their runtime dependencies
    when ``transitive``), fetched once into ``peers/<name>``."""
    with _once(name) as (target, ready):
        if not ready:
            staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
            try:
                _ivy_retrieve(coordinates, staging, transitive)
                (staging / ".complete").write_text("\n".join(coordinates) + "\n")
                shutil.rmtree(target, ignore_errors=True)
                staging.rename(target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    return sorted((target / "lib").glob("*.jar"))


def _ivy_retrieve(coordinates: Sequence[str], target: Path, transitive: bool) -> None:
    deps = []
    for coordinate in coordinates:
        org, artifact, rev = coordinate.split(":")
        deps.append(
            f"<dependency org={quoteattr(org)} name={quoteattr(artifact)} rev={quoteattr(rev)} "
            f'transitive="{str(transitive).lower()}" conf="default->default"/>'
        )
    (target / "ivy.xml").write_text(
        '<ivy-module version="2.0"><info organisation="kafka2pc" module="bench-peer"/>'
        f"<dependencies>{''.join(deps)}</dependencies></ivy-module>\n"
    )
    (target / "ivysettings.xml").write_text(
        '<ivysettings><settings defaultResolver="maven"/><resolvers><ibiblio name="maven" '
        f'm2compatible="true" root={quoteattr(repository())}/></resolvers></ivysettings>\n'
    )
    command = [
        java_binary(),
        "-jar",
        ivy_jar(),
        "-settings",
        str(target / "ivysettings.xml"),
        "-ivy",
        str(target / "ivy.xml"),
        "-cache",
        str(peers_root() / "ivy-cache"),
        "-confs",
        "default",
        "-retrieve",
        str(target / "lib" / "[artifact]-[revision](-[classifier]).[ext]"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0 or not list((target / "lib").glob("*.jar")):
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
        raise PeerUnavailable(
            f"could not fetch {', '.join(coordinates)} from {repository()} with Ivy:\n{tail}"
        )


def python_venv(name: str, requirements: Sequence[str], python: str | None = None) -> Path:
    """The interpreter of a virtualenv ``peers/<name>`` holding ``requirements`` (pip)."""
    with _once(name) as (target, ready):
        if not ready:
            base = python or getattr(sys, "_base_executable", sys.executable)
            steps = [
                [base, "-m", "venv", str(target)],
                [str(target / "bin" / "python"), "-m", "pip", "install", "--quiet", *requirements],
            ]
            for step in steps:
                done = subprocess.run(step, capture_output=True, text=True, timeout=1800)
                if done.returncode != 0:
                    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
                    raise PeerUnavailable(f"{' '.join(step[-3:])} failed in {target}:\n{tail}")
            (target / ".complete").write_text("\n".join(requirements) + "\n")
    return target / "bin" / "python"
