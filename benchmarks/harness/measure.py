"""Wall time and CPU of a benchmark step, split into the broker's and everyone else's.

Why CPU: on a shared 2-core machine wall time swings with other people's load, CPU seconds
much less. Why from /proc: the systems compared run in child processes (spark-submit, a
JVM, Python workers that Spark's daemon forks), some of which outlive their parent; this
process becomes their subreaper (``PR_SET_CHILD_SUBREAPER``), so every descendant stays in
its process tree and its CPU is counted, live or exited.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE_MIB = os.sysconf("SC_PAGE_SIZE") / 2**20
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphaned descendants are re-parented to this process instead of init (Linux only)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1)


@dataclass(frozen=True)
class _Proc:
    pid: int
    ppid: int
    name: str
    state: str
    #: CPU seconds of the process itself.
    own: float
    #: ... plus those of its children it waited for.
    cpu: float
    #: Resident memory now, MiB.
    rss_mib: float = 0.0


def _processes() -> dict[int, _Proc]:
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()  # from field 3 (state) on
        own = int(fields[11]) + int(fields[12])  # utime, stime
        waited = int(fields[13]) + int(fields[14])  # cutime, cstime
        found[int(entry)] = _Proc(
            int(entry),
            int(fields[1]),
            name,
            fields[0],
            own / _TICK,
            (own + waited) / _TICK,
            int(fields[21]) * _PAGE_MIB,  # rss, in pages
        )
    return found


#: Spark's Python workers: forked by its daemon, they keep the daemon's command line.
_PYSPARK_WORKER = (b"pyspark.daemon", b"pyspark.worker")


def _group(proc: _Proc, root: int) -> str:
    if proc.pid == root:
        return "benchmark"
    if proc.name == "java":
        return "JVM"
    if proc.name.startswith("pyspark") or _cmdline_has(proc.pid, _PYSPARK_WORKER):
        return "Python worker"
    if proc.name.startswith("python"):
        return "Python"
    return "other"


#: A benchmark's own names for some processes: (pid, name) -> a group, or None for the
#: default grouping (:func:`_group`). Read once per process (and program it execs).
Classify = Callable[[int, str], str | None]


def cmdline(pid: int) -> bytes:
    """A process's command line (NUL-separated; empty when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def rss_mib(pid: int) -> float | None:
    """Resident memory of one process now, MiB (None when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[21]) * _PAGE_MIB


def _cmdline_has(pid: int, words: tuple[bytes, ...]) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return any(w in cmdline for w in words)


def process_cpu(pid: int) -> float | None:
    """CPU seconds one process has used so far (None when it is gone)."""
    return _stat_cpu(f"/proc/{pid}/stat")


def _stat_cpu(stat: str) -> float | None:
    """User + system CPU seconds from a process's or a thread's ``stat`` file (None: gone)."""
    try:
        fields = Path(stat).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


#: Broker threads by what they do, from their names (``/proc/<pid>/task/<tid>/comm``: the
#: JVM's thread name cut to 15 characters). "requests" are the network processors and request
#: handlers (``data-plane-kafka-...``): produce, EndTxn, the markers the coordinator writes,
#: every append. The rest runs on an idle broker too: measured here at 0.05-0.11 CPU s per
#: second, mostly the JIT compilers and the KRaft loop, charged to a run in proportion to
#: its wall time.
_BROKER_THREADS = (
    ("requests", ("data-plane-kafk",)),
    ("JIT", ("C1 CompilerThre", "C2 CompilerThre")),
    ("GC", ("GC Thread", "G1 ")),
)


def broker_threads(pid: int) -> dict[str, float]:
    """CPU seconds the broker's live threads have used so far, by kind (see above)."""
    out: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        except OSError:
            continue  # the thread ended
        cpu = _stat_cpu(f"/proc/{pid}/task/{tid}/stat")
        if cpu is None:
            continue  # the thread ended
        kind = next((k for k, prefixes in _BROKER_THREADS if name.startswith(prefixes)), "other")
        out[kind] = out.get(kind, 0.0) + cpu
    return out


def _tree(exclude: Iterable[int]) -> list[_Proc]:
    """This process and its descendants, without the subtrees under ``exclude``."""
    root, skip = os.getpid(), set(exclude)
    procs = _processes()
    children: dict[int, list[int]] = {}
    for proc in procs.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid not in skip and pid in procs:
            tree.append(procs[pid])
            todo.extend(children.get(pid, ()))
    return tree


def descendants(exclude: Iterable[int] = ()) -> list[tuple[int, str]]:
    """(pid, name) of this process's descendants, without the subtrees under ``exclude``."""
    root = os.getpid()
    return [(p.pid, p.name) for p in _tree(exclude) if p.pid != root]


def reap_orphans(keep: Iterable[int] = ()) -> None:
    """Wait for exited descendants re-parented to this process (their CPU moves into ours)."""
    me, known = os.getpid(), set(keep)
    for proc in _processes().values():
        if proc.ppid == me and proc.state == "Z" and proc.pid not in known:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(proc.pid, os.WNOHANG)


@dataclass
class Meter:
    """What one step cost: filled in when its ``measure()`` block ends."""

    seconds: float = 0.0
    #: CPU seconds of this process and its descendants, the broker excluded (exact).
    cpu: float = 0.0
    #: The same by group (benchmark, JVM, Python, other), from samples every 0.2 s: a
    #: process that exits between two samples loses its last 0.2 s at most.
    cpu_groups: dict[str, float] = field(default_factory=dict)
    #: CPU seconds of the broker's JVM (None for a broker not started here).
    broker_cpu: float | None = None
    #: The same by kind of thread (:func:`broker_threads`; a thread that ended meanwhile is
    #: not counted): "requests" is the broker's work for the clients, the rest mostly not.
    broker_threads: dict[str, float] = field(default_factory=dict)
    #: The largest resident memory one process of each group reached (MiB, the same
    #: samples): whether the driver's and the workers' memory stays flat as rows grow.
    peak_rss_mib: dict[str, float] = field(default_factory=dict)
    #: Per group, the largest sum of its processes' resident memory in one sample (MiB):
    #: the group's peak as a whole (several Python workers at once, say).
    group_rss_mib: dict[str, float] = field(default_factory=dict)
    #: The broker JVM's largest resident memory in the same samples (None: not sampled).
    broker_peak_rss_mib: float | None = None
    #: The same samples as a time series: (epoch ms, CPU s of the measured processes so
    #: far, CPU s of the broker so far), so that a phase's CPU, and the cores left idle
    #: in it, can be read for any span of the run (:mod:`.cores`).
    series: list[tuple[float, float, float]] = field(default_factory=list)


class _Sampler(threading.Thread):
    """Each descendant's own CPU, first and last seen, by group."""

    def __init__(
        self,
        exclude: list[int],
        interval_s: float = 0.2,
        broker_pid: int | None = None,
        classify: Classify | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.exclude, self.interval_s, self.broker_pid = exclude, interval_s, broker_pid
        self.classify = classify
        self.first: dict[int, float] = {}
        self.last: dict[int, tuple[str, float]] = {}
        self.peak_rss: dict[int, float] = {}
        self.group_rss: dict[str, float] = {}
        self.broker_rss: float | None = None
        self.groups_of: dict[tuple[int, str], str] = {}
        self.series: list[tuple[float, float, float]] = []
        self.broker_first = (process_cpu(broker_pid) or 0.0) if broker_pid else 0.0
        self.stop = threading.Event()
        self.sample(initial=True)

    def sample(self, initial: bool = False) -> None:
        """Processes already there count from now on, new ones from their start."""
        root = os.getpid()
        in_group: dict[str, float] = {}
        for proc in _tree(self.exclude):
            self.first.setdefault(proc.pid, proc.own if initial else 0.0)
            known = (proc.pid, proc.name)  # a process that execs another program is regrouped
            if known not in self.groups_of:  # its command line is read once
                mine = self.classify(proc.pid, proc.name) if self.classify else None
                self.groups_of[known] = mine or _group(proc, root)
            group = self.groups_of[known]
            self.last[proc.pid] = (group, proc.own)
            self.peak_rss[proc.pid] = max(self.peak_rss.get(proc.pid, 0.0), proc.rss_mib)
            in_group[group] = in_group.get(group, 0.0) + proc.rss_mib
        for group, total in in_group.items():
            self.group_rss[group] = max(self.group_rss.get(group, 0.0), total)
        if self.broker_pid:
            broker_rss = rss_mib(self.broker_pid)
            if broker_rss is not None:
                self.broker_rss = max(self.broker_rss or 0.0, broker_rss)
        # An exited process keeps its last sample: the series never goes back.
        used = sum(cpu - self.first[pid] for pid, (_, cpu) in self.last.items())
        broker = (process_cpu(self.broker_pid) or 0.0) - self.broker_first if self.broker_pid else 0
        self.series.append((time.time() * 1000, used, broker))

    def run(self) -> None:
        while not self.stop.wait(self.interval_s):
            self.sample()

    def groups(self) -> dict[str, float]:
        self.stop.set()
        self.join()
        self.sample()
        out: dict[str, float] = {}
        for pid, (group, cpu) in self.last.items():
            out[group] = out.get(group, 0.0) + cpu - self.first[pid]
        return out

    def peaks(self) -> dict[str, float]:
        """Per group, the largest peak of one process (call after :meth:`groups`)."""
        out: dict[str, float] = {}
        for pid, (group, _) in self.last.items():
            out[group] = max(out.get(group, 0.0), self.peak_rss.get(pid, 0.0))
        return out


@contextlib.contextmanager
def measure(
    broker_pid: int | None = None,
    *,
    by_group: bool = True,
    exclude: Iterable[int] = (),
    classify: Classify | None = None,
    interval_s: float = 0.2,
) -> Iterator[Meter]:
    """Measure the block: wall seconds, CPU (total, and by process group unless
    ``by_group`` is False: its sampling thread would take the GIL from an in-process side
    now and then), the broker's CPU. The process trees under ``exclude`` (a long-lived
    server another side uses) are left out, as the broker is. ``classify`` names some
    processes' groups (the others are grouped by :func:`_group`); with ``by_group`` the
    broker's resident memory is sampled too, every ``interval_s``."""
    meter = Meter()
    exclude = [*([broker_pid] if broker_pid else []), *exclude]
    broker_before = process_cpu(broker_pid) if broker_pid else None
    threads_before = broker_threads(broker_pid) if broker_pid else {}
    before = sum(p.cpu for p in _tree(exclude))
    sampler = (
        _Sampler(exclude, interval_s, broker_pid=broker_pid, classify=classify)
        if by_group
        else None
    )
    if sampler is not None:
        sampler.start()
    start = time.perf_counter()
    try:
        yield meter
    finally:
        meter.seconds = time.perf_counter() - start
        meter.cpu_groups = sampler.groups() if sampler is not None else {}
        meter.peak_rss_mib = sampler.peaks() if sampler is not None else {}
        meter.group_rss_mib = dict(sampler.group_rss) if sampler is not None else {}
        meter.broker_peak_rss_mib = sampler.broker_rss if sampler is not None else None
        meter.series = sampler.series if sampler is not None else []
        # Exact: a descendant that exited and was reaped meanwhile moved into its parent's
        # count of waited-for children.
        meter.cpu = sum(p.cpu for p in _tree(exclude)) - before
        if broker_pid and broker_before is not None:
            after = process_cpu(broker_pid)
            meter.broker_cpu = None if after is None else after - broker_before
            threads_after = broker_threads(broker_pid)
            meter.broker_threads = {
                kind: cpu - threads_before.get(kind, 0.0) for kind, cpu in threads_after.items()
            }
        reap_orphans(exclude)
