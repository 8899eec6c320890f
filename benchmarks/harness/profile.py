"""Where the Python processes of a run spend their CPU: py-spy, sampling this process tree.

Why a sampler: Spark's Python workers are forked by its daemon and live for one job, so
nothing can be instrumented from outside without changing what is measured; py-spy reads
their stacks from outside. It runs in a virtualenv of its own (``py-spy`` from PyPI), is
attached to this process with ``--subprocesses`` (so it follows every descendant: the
spark-submit driver, the workers, ``kafka2pc commit``), and records active samples only:
running, or runnable and waiting for a CPU (on a loaded machine the seconds overstate CPU
time; the shares stay meaningful). A profiled run is an extra run, never a timed one.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .fetch import python_venv

PY_SPY = "py-spy==0.4.3"
_PROCESS = re.compile(r'^process (\d+):"(.*?)"$')


@dataclass
class Profile:
    """Active samples per process kind, per function (the innermost frame) and per frame
    anywhere on the stack (inclusive)."""

    rate: int
    seconds: Counter[str] = field(default_factory=Counter)
    functions: dict[str, Counter[str]] = field(default_factory=dict)
    #: Seconds of every frame anywhere on the stack, per kind.
    inclusive: dict[str, Counter[str]] = field(default_factory=dict)

    def add(self, kind: str, frames: list[str], samples: int) -> None:
        seconds = samples / self.rate
        self.seconds[kind] += seconds
        self.functions.setdefault(kind, Counter())[_short(frames[-1])] += seconds
        marks = self.inclusive.setdefault(kind, Counter())
        for frame in dict.fromkeys(_short(f) for f in frames):
            marks[frame] += seconds

    def lines(self, top: int = 8) -> list[str]:
        """Per process kind: seconds sampled, then the biggest functions as shares of them."""
        out = []
        for kind, seconds in self.seconds.most_common():
            out.append(f"{kind}: {seconds:.1f} s sampled")

            def share(counter: Counter[str], seconds: float = seconds) -> str:
                return ", ".join(
                    f"{f} {s / seconds:.0%}"
                    for f, s in counter.most_common(3 * top)
                    if not f.startswith(_WRAPPERS)
                )

            own = Counter(dict(self.functions[kind].most_common(top)))
            out.append(f"  own (innermost frame): {share(own)}")
            out.append(f"  inclusive: {share(self.inclusive[kind])}")
        return out


def _short(frame: str) -> str:
    """``write (airflow_provider_kafka2pc/transaction/writer.py:160)`` -> ``write (writer.py)``;
    every frame of the import machinery (importlib, zipimport) -> ``importing modules``."""
    name, _, where = frame.partition(" (")
    if where.startswith(("<frozen importlib", "<frozen zipimport")):
        return "importing modules"
    return f"{name} ({where.rsplit('/', 1)[-1].split(':')[0]})" if where else name


#: Frames that only wrap everything below them: not worth a line of their own.
_WRAPPERS = ("<module>", "main (", "_run_", "Thread._bootstrap", "manager (", "worker (")


def _kind(command: str) -> str:
    if "pyspark.daemon" in command or "pyspark/daemon" in command or "worker" in command:
        return "Spark Python worker"
    if "spark/app.py" in command:
        return "Spark driver (prepare application)"
    if "kafka2pc" in command and "commit" in command:
        return "kafka2pc commit"
    return command.split()[-1] if command else "?"


@contextlib.contextmanager
def profiled(output: Path, rate: int = 100) -> Iterator[Profile]:
    """Sample every Python process under this one while the block runs."""
    python = python_venv("py-spy-0.4.3", [PY_SPY])
    raw = output.with_suffix(".raw")
    process = subprocess.Popen(
        [
            str(python.with_name("py-spy")),
            *("record", "--pid", str(os.getpid()), "--subprocesses", "--nonblocking"),
            *("--rate", str(rate), "--format", "raw", "--output", str(raw)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=output.with_suffix(".log").open("w"),
    )
    profile = Profile(rate)
    try:
        yield profile
    finally:
        process.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        process.wait(timeout=120)
    me = str(os.getpid())
    for line in raw.read_text().splitlines() if raw.exists() else ():
        stack, _, count = line.rpartition(" ")
        # A stack starts with the process's ancestry ("process PID:cmdline" frames).
        frames = stack.split(";")
        last = max((i for i, f in enumerate(frames) if _PROCESS.match(f)), default=None)
        if last is None or last + 1 >= len(frames) or not count.isdigit():
            continue
        pid, command = _PROCESS.match(frames[last]).groups()  # type: ignore[union-attr]
        if pid != me:  # the benchmark itself (its sampler, its checks) is not the subject
            profile.add(_kind(command), frames[last + 1 :], int(count))
