"""Which process is which, from ``/proc``: the task processes a nemesis may kill.

Airflow 3's LocalExecutor runs each task in a supervisor that forks the task runner, whose
process title is ``airflow worker -- <task instance id>``; the prepare task's
``spark-submit`` JVM (``org.apache.spark.deploy.SparkSubmit``) is its descendant: in local
mode it is the driver and hosts the executors, so the JVM writer's producers are threads of
it. Two processes before it name ``SparkSubmit`` in their arguments too: the ``spark-class``
shell (it execs the JVM under its own pid) and the launcher JVM that shell runs first to
compute the command line (``org.apache.spark.launcher.Main``, about a second of life): a
kill aimed at the driver must not take either for it. Spark's Python workers
(``pyspark.daemon`` and the workers it forks) exist only under the Python writer (or a
Python source).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")
#: The main class of spark-submit's JVM, and of the launcher that computes its command line.
DRIVER_CLASS = "org.apache.spark.deploy.SparkSubmit"
LAUNCHER_CLASS = "org.apache.spark.launcher.Main"


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    cmdline: str


def processes() -> dict[int, Proc]:
    """Every process now, by pid (those that vanish while read are skipped)."""
    found: dict[int, Proc] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: ppid follows the last ")".
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        found[int(entry.name)] = Proc(int(entry.name), ppid, cmdline.strip())
    return found


def descendants(root: int, table: dict[int, Proc]) -> list[Proc]:
    """Every process below ``root`` (not itself), parents before children."""
    children: dict[int, list[Proc]] = {}
    for proc in table.values():
        children.setdefault(proc.ppid, []).append(proc)
    out: list[Proc] = []
    todo = [root]
    while todo:
        for child in sorted(children.get(todo.pop(0), []), key=lambda p: p.pid):
            out.append(child)
            todo.append(child.pid)
    return out


def task_runners(table: dict[int, Proc]) -> dict[str, Proc]:
    """Task instance id -> its task runner process (title ``airflow worker -- <uuid>``)."""
    runners: dict[str, Proc] = {}
    for proc in table.values():
        head, sep, tail = proc.cmdline.partition("airflow worker -- ")
        if sep and not head and tail and " " not in tail and "LocalExecutor" not in tail:
            runners[tail] = proc
    return runners


def is_driver_jvm(cmdline: str) -> bool:
    """Whether ``cmdline`` is spark-submit's own JVM (the driver; in local mode the
    executors too): a ``java`` running :data:`DRIVER_CLASS`, not the ``spark-class`` shell
    that will exec it nor the launcher JVM (whose arguments name the driver class too)."""
    argv = cmdline.split()
    return (
        bool(argv)
        and Path(argv[0]).name == "java"
        and DRIVER_CLASS in argv
        and LAUNCHER_CLASS not in argv
    )


def spark_jvms(runner: Proc, table: dict[int, Proc]) -> list[Proc]:
    """The spark-submit driver JVMs below a prepare task (:func:`is_driver_jvm`)."""
    return [p for p in descendants(runner.pid, table) if is_driver_jvm(p.cmdline)]


def python_workers(runner: Proc, table: dict[int, Proc]) -> list[Proc]:
    """Spark's Python workers below a prepare task: forks of ``pyspark.daemon`` first
    (they write the partitions), the daemon itself otherwise."""
    below = [p for p in descendants(runner.pid, table) if "pyspark.daemon" in p.cmdline]
    daemons = {p.pid for p in below}
    forked = [p for p in below if p.ppid in daemons]
    return forked or below


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def state(pid: int) -> str | None:
    """The process's state letter from ``/proc/<pid>/stat`` (R, S, T, Z, ...), None if gone."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2]


def started_at(pid: int) -> float | None:
    """When ``pid`` started, in epoch seconds (``/proc``: boot time plus its start in clock
    ticks; about a second's precision); None if gone. A ``spark-class`` shell that exec'd
    the driver JVM keeps its pid, so this is the shell's start, a second before the JVM's."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
        boot = next(
            float(line.split()[1])
            for line in (_PROC / "stat").read_text().splitlines()
            if line.startswith("btime ")
        )
    except (OSError, StopIteration):
        return None
    # Fields after the command: state is field 3, starttime field 22.
    ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def gone(pid: int) -> bool:
    """Dead: no process, or a zombie its parent has not reaped yet."""
    return state(pid) in (None, "Z", "X")


def wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    """Whether ``pid`` died within ``timeout_s`` (a SIGKILL is not instant)."""
    deadline = time.monotonic() + timeout_s
    while not gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def wait_state(pid: int, letter: str, timeout_s: float) -> bool:
    """Whether ``pid`` reached state ``letter`` (``T``: stopped by SIGSTOP) in time."""
    deadline = time.monotonic() + timeout_s
    while state(pid) != letter:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
