"""A JVM's heap after garbage collection: what it keeps live, not what it has committed.

Why two ways: resident memory says what a JVM took from the machine (its heap grows to
the limit whether or not it needs it); the heap after a collection says what it keeps.
A spark-submit JVM exits with its application, so nothing can be asked of it after the
write: its own GC log (``-Xlog:gc``, unified logging) is read afterwards, every pause with
the heap before, after and its capacity. A long-lived JVM (the broker) is asked instead:
``jcmd <pid> GC.run`` (a full collection), then ``jcmd <pid> GC.heap_info``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_UNIT_MIB = {"K": 1 / 1024, "M": 1.0, "G": 1024.0}
#: ``GC(12) Pause Young (Normal) (G1 Evacuation Pause) 180M->40M(1024M) 3.2ms``, also
#: ``Pause Full (System.gc())``, ``Pause Remark``, ``Pause Cleanup``.
_PAUSE = re.compile(
    r"GC\(\d+\) (?P<kind>Pause [A-Za-z]+)[^>]*? (?P<before>\d+)(?P<bu>[KMG])->"
    r"(?P<after>\d+)(?P<au>[KMG])\((?P<cap>\d+)(?P<cu>[KMG])\)"
)
_MAX = re.compile(r"Heap Max Capacity: (?P<n>\d+)(?P<u>[KMG])")
#: Characters -Xlog cannot take in a file name.
_UNSAFE = frozenset(':,"= ')


def gc_log_option(path: Path) -> str:
    """The Java option that logs every pause (and the heap's limits at start) to ``path``,
    one file however long the run (no rotation)."""
    if _UNSAFE & set(str(path)):
        raise ValueError(f"-Xlog cannot take the file name {path}")
    return f"-Xlog:gc,gc+init:file={path}:uptime,level,tags:filecount=0"


@dataclass(frozen=True)
class HeapAfterGc:
    """A JVM's pauses, from its GC log (MiB)."""

    pauses: int
    #: The largest heap after any pause: an upper bound of what was live (a young pause
    #: leaves the old generation's garbage in place until a mixed or full collection).
    peak_after_mib: float
    #: After the run's last pause.
    last_after_mib: float
    #: The largest heap after a full collection (None: the run had none).
    peak_after_full_mib: float | None
    #: The largest capacity the heap was grown to, and its limit (-Xmx).
    peak_capacity_mib: float
    max_mib: float | None

    def summary(self) -> str:
        full = "-" if self.peak_after_full_mib is None else f"{self.peak_after_full_mib:.0f}"
        limit = "?" if self.max_mib is None else f"{self.max_mib:.0f}"
        return (
            f"{self.pauses} pauses; after GC: peak {self.peak_after_mib:.0f} MiB, last "
            f"{self.last_after_mib:.0f}, peak after a full GC {full}; heap grown to "
            f"{self.peak_capacity_mib:.0f} of {limit} MiB"
        )


def read_gc_log(path: Path) -> HeapAfterGc | None:
    """The pauses of a GC log written with :func:`gc_log_option` (None: no pause)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    pauses = [m for m in _PAUSE.finditer(text)]
    if not pauses:
        return None
    after = [_mib(m["after"], m["au"]) for m in pauses]
    full = [_mib(m["after"], m["au"]) for m in pauses if m["kind"] == "Pause Full"]
    limit = _MAX.search(text)
    return HeapAfterGc(
        pauses=len(pauses),
        peak_after_mib=max(after),
        last_after_mib=after[-1],
        peak_after_full_mib=max(full) if full else None,
        peak_capacity_mib=max(_mib(m["cap"], m["cu"]) for m in pauses),
        max_mib=_mib(limit["n"], limit["u"]) if limit else None,
    )


def _mib(number: str, unit: str) -> float:
    return int(number) * _UNIT_MIB[unit]


def heap_after_full_gc(pid: int, timeout_s: float = 120.0) -> float | None:
    """A live JVM's used heap (MiB) right after a full collection it is asked to run
    (``jcmd GC.run``, then ``GC.heap_info``); None when jcmd is missing or fails."""
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        return None
    try:
        ran = subprocess.run(
            [jcmd, str(pid), "GC.run"], capture_output=True, text=True, timeout=timeout_s
        )
        info = subprocess.run(
            [jcmd, str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    used = re.search(r"heap\s+total \d+K, used (\d+)K", info.stdout)
    if ran.returncode != 0 or info.returncode != 0 or used is None:
        return None
    return int(used.group(1)) / 1024
