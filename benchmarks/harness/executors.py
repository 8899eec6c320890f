"""A Spark cluster's executors: when each JVM started, registered and ran its first task.

Why: on a cluster the writers run in executor JVMs that each application starts anew (a
worker forks one per application), and the driver's class archive does not reach them.
What that start costs is read from two clocks of this one machine: the process's own start
(``/proc/<pid>/stat``, to the clock tick), seen by a watcher while the application runs,
and the driver's event log (``SparkListenerExecutorAdded``: the executor registered;
each task's launch). The JVM's start and registration is the part a class archive can cut;
the master's scheduling and the worker's fork come before it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .measure import cmdline, descendants
from .spark import _events

_TICK = os.sysconf("SC_CLK_TCK")
#: The class a standalone worker runs an executor as.
EXECUTOR_CLASS = b"org.apache.spark.executor.CoarseGrainedExecutorBackend"


def process_start_ms(pid: int) -> float | None:
    """When ``pid`` started, epoch ms (to the clock tick); None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except OSError:
        return None
    now = time.time()
    return (now - (uptime - int(fields[19]) / _TICK)) * 1000


def _argument(command: bytes, name: bytes) -> str | None:
    parts = command.split(b"\0")
    try:
        return parts[parts.index(name) + 1].decode()
    except (ValueError, IndexError):
        return None


@dataclass
class ExecutorProcess:
    """One executor JVM as the watcher saw it (epoch ms)."""

    pid: int
    executor_id: str
    app_id: str
    started_ms: float
    #: The first poll that no longer found it (None: still alive when the watch ended).
    gone_ms: float | None = None


@dataclass
class Watch:
    """The executor JVMs seen during one watch, by (application id, executor id)."""

    processes: dict[tuple[str, str], ExecutorProcess] = field(default_factory=dict)

    def of_app(self, app_id: str) -> dict[str, ExecutorProcess]:
        return {e: p for (a, e), p in self.processes.items() if a == app_id}


@contextmanager
def watch_executors(interval_s: float = 0.1, linger_s: float = 0.0) -> Iterator[Watch]:
    """Every ``interval_s``, the executor JVMs among this process's descendants (a worker
    started here forks them): each one's start, and when it was gone. After the block,
    up to ``linger_s`` more while any is still alive (an executor that writes a class
    archive as it exits outlives its application by the dump)."""
    watch = Watch()
    stop = threading.Event()

    def poll() -> bool:
        alive = set()
        for pid, name in descendants():
            if name != "java":
                continue
            command = cmdline(pid)
            if EXECUTOR_CLASS not in command:
                continue
            alive.add(pid)
            app = _argument(command, b"--app-id")
            executor = _argument(command, b"--executor-id")
            key = (app or "?", executor or "?")
            if key not in watch.processes:
                started = process_start_ms(pid)
                if started is not None:
                    watch.processes[key] = ExecutorProcess(pid, key[1], key[0], started)
        now = time.time() * 1000
        for process in watch.processes.values():
            if process.gone_ms is None and process.pid not in alive:
                process.gone_ms = now
        return bool(alive)

    def run() -> None:
        while not stop.wait(interval_s):
            poll()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield watch
    finally:
        stop.set()
        thread.join()
        deadline = time.monotonic() + linger_s
        while poll() and time.monotonic() < deadline:
            time.sleep(interval_s)


@dataclass(frozen=True)
class ExecutorStart:
    """One executor of an application (seconds from the application's start)."""

    executor_id: str
    #: The JVM's process started: the master scheduled it, the worker forked it.
    launched_s: float | None
    #: The executor registered with the driver (``SparkListenerExecutorAdded``).
    registered_s: float
    #: Its first task launched (None: it ran none).
    first_task_s: float | None
    #: Its JVM exited, after the application's end (None: not seen).
    exited_after_end_s: float | None

    @property
    def jvm_to_registered_s(self) -> float | None:
        """From the JVM's start to its registration: the JVM's own start (class loading),
        the executor's set-up, its connection to the driver."""
        return None if self.launched_s is None else self.registered_s - self.launched_s


@dataclass(frozen=True)
class ExecutorStarts:
    """An application's executors, from its event log and a :class:`Watch`."""

    app_id: str
    executors: list[ExecutorStart]
    #: From the first job's submission to the first task's launch: how long the job
    #: waited for an executor (0 when one was there already).
    first_job_waited_s: float | None

    def mean(self, attribute: str) -> float:
        values = [v for e in self.executors if (v := getattr(e, attribute)) is not None]
        return sum(values) / len(values) if values else float("nan")


def executor_starts(event_dir: Path, watch: Watch | None = None) -> ExecutorStarts | None:
    """The executors of the application whose event log is in ``event_dir`` (None when the
    log has no application start)."""
    app_id, start, end, first_job = None, None, None, None
    added: dict[str, float] = {}
    first_task: dict[str, float] = {}
    for event in _events(event_dir):
        kind = event["Event"]
        if kind == "SparkListenerApplicationStart":
            app_id, start = event.get("App ID"), event["Timestamp"]
        elif kind == "SparkListenerApplicationEnd":
            end = event["Timestamp"]
        elif kind == "SparkListenerExecutorAdded":
            added.setdefault(event["Executor ID"], event["Timestamp"])
        elif kind == "SparkListenerJobStart" and first_job is None:
            first_job = event["Submission Time"]
        elif kind == "SparkListenerTaskStart":
            info = event["Task Info"]
            first_task.setdefault(info["Executor ID"], info["Launch Time"])
    if start is None or app_id is None:
        return None
    processes = watch.of_app(app_id) if watch is not None else {}

    def since(ms: float | None) -> float | None:
        return None if ms is None else (ms - start) / 1000

    executors = []
    for executor_id, registered in sorted(added.items(), key=lambda item: item[1]):
        process = processes.get(executor_id)
        gone = process.gone_ms if process is not None else None
        executors.append(
            ExecutorStart(
                executor_id,
                since(process.started_ms) if process is not None else None,
                (registered - start) / 1000,
                since(first_task.get(executor_id)),
                None if gone is None or end is None else (gone - end) / 1000,
            )
        )
    tasks = list(first_task.values())
    waited = None
    if first_job is not None and tasks:
        waited = max(0.0, (min(tasks) - first_job) / 1000)
    return ExecutorStarts(app_id, executors, waited)
