"""A schema registry for the benchmarks: the tests' Apicurio Registry, started once, untimed.

Why the tests' registry: it is the one the registry formats are tested against
(``tests/support/registry.py``: Apicurio Registry 2.4.2's Confluent-compatible API, built
from Maven Central into ``~/.cache/kafka2pc`` on first use, in-memory storage). Its
process is found by its jar in this process's children so that every measured run can
leave it out of its CPU, as it leaves out the broker.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]
if str(_REPO) not in sys.path:  # ``python benchmarks/bench_x.py``: the repository's tests/
    sys.path.append(str(_REPO))

from tests.support.registry import HOME, RUNNER, running_registry  # noqa: E402

__all__ = ["HOME", "Registry", "schema_registry"]


@dataclass(frozen=True)
class Registry:
    """A running registry: its Confluent-compatible URL, its JVM's pid, its start-up time."""

    url: str
    pid: int | None
    start_seconds: float
    log: Path


def _child_with(jar: Path) -> int | None:
    """The pid of this process's child whose command line names ``jar``."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == me and str(jar).encode() in cmdline:
            return int(entry)
    return None


@contextmanager
def schema_registry(log_dir: Path) -> Iterator[Registry]:
    """Build (first time only) and start the registry; stopped when the block ends."""
    start = time.perf_counter()
    with running_registry(log_dir) as url:
        yield Registry(url, _child_with(RUNNER), time.perf_counter() - start, log_dir)
