"""Which prepare JVM a task kill strikes: one at work, not one starting or ending.

Why: a kill that took the first process naming ``SparkSubmit`` struck the launcher JVM of
``spark-class`` (it lives about a second: on a busy machine it was gone before the signal)
or a driver that had not begun; the CI soak could not require it. The default (JVM) writer's
producers are threads of the prepare's driver JVM, so a driver whose own export and interval
has a transaction open that was first seen after the JVM started is writing (or has written
and not yet handed its transactions over): that is the victim preferred. A prepare leaves
its transactions open when its JVM exits (decide and commit run later), so an open
transaction alone says nothing of the JVM: it is only evidence for a JVM alive now.

On a loaded machine a prepare may take minutes before it writes; after ``patience_s`` any
driver JVM at least ``min_age_s`` old (past its start-up, inside its prepare) will do, as
the broker faults settle for a running prepare after half their wait.

Pure (:func:`choose`), so the decision is tested without a cluster (``test_soak.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Jvm:
    """A prepare's driver JVM alive now."""

    pid: int
    #: the export kind and the interval (``yyyymmdd``) of the prepare it runs
    export: str
    interval: str
    #: when the process started (epoch seconds)
    started: float


@dataclass(frozen=True)
class OpenTxn:
    """A transaction of the exports open at the recorder's last sample."""

    export: str
    interval: str
    transactional_id: str
    #: the first sample that saw it open (epoch seconds)
    first_seen: float


def writing(jvm: Jvm, open_txns: Iterable[OpenTxn]) -> OpenTxn | None:
    """The open transaction that says ``jvm`` writes: its own export's and interval's,
    first seen after it started (an earlier try's, still open, is not its work)."""
    return next(
        (
            t
            for t in open_txns
            if (t.export, t.interval) == (jvm.export, jvm.interval) and t.first_seen > jvm.started
        ),
        None,
    )


def choose(
    jvms: Iterable[Jvm],
    open_txns: Iterable[OpenTxn],
    *,
    now: float,
    waited_s: float,
    patience_s: float,
    min_age_s: float,
) -> list[tuple[Jvm, str]]:
    """The JVMs a kill may strike now, each with why, in pid order (the fault's pick
    chooses among them): those writing; if none, once ``waited_s`` reached ``patience_s``,
    those at least ``min_age_s`` old; else none (wait)."""
    ordered = sorted(jvms, key=lambda j: j.pid)
    txns = list(open_txns)
    found = []
    for jvm in ordered:
        txn = writing(jvm, txns)
        if txn is not None:
            found.append((jvm, f"writing: {txn.transactional_id} open since the JVM started"))
    if found or waited_s < patience_s:
        return found
    return [
        (jvm, f"in its prepare for {now - jvm.started:.0f} s, no open transaction of its own")
        for jvm in ordered
        if now - jvm.started >= min_age_s
    ]
