"""The nemesis's fault schedule: a pure function of the seed, so a seed replays a run.

Only the schedule is deterministic: when each fault comes, of which kind, and the random
numbers that pick its victim and how long it lasts. What the victim is (which task process
is running, which node coordinates the ids) depends on the moment it strikes; the history
records both.
"""

from __future__ import annotations

import enum
import random
from dataclasses import asdict, dataclass
from typing import Any


class FaultKind(enum.StrEnum):
    #: SIGKILL of a task process (:data:`TASK_TARGETS`: the prepare's spark-submit JVM, the
    #: prepare task itself, a Python worker of the Python writer, decide, commit, abort,
    #: recover).
    KILL_TASK = "kill_task"
    #: ``kill -9`` of a broker (the transaction coordinator of a pooled id preferred), and
    #: its restart.
    KILL_BROKER = "kill_broker"
    #: A broker SIGSTOPped past its session timeout, then resumed.
    PAUSE_BROKER = "pause_broker"
    #: The ledger's PostgreSQL server crash-restarted (``pg_ctl -m immediate restart``).
    RESTART_POSTGRES = "restart_postgres"
    #: Every connection to a broker (or to all) dropped and refused for a while, by the proxy.
    DROP_CONNECTIONS = "drop_connections"
    #: ``airflow tasks clear`` of a random finished task.
    CLEAR_TASK = "clear_task"


#: What a task kill aims at, and how often. The default path first: ``spark_jvm`` is the
#: prepare's spark-submit JVM, the driver that in local mode also hosts the executors, so
#: the JVM writer's producers are its threads; ``prepare`` the prepare task's own process
#: (its spark-submit child is orphaned and goes on); ``commit`` the commit task. The Python
#: writer's ``python_worker`` (a fork of ``pyspark.daemon``) exists only in its intervals;
#: ``abort`` and ``recover`` run briefly or rarely, so a kill of theirs often finds nothing.
TASK_TARGETS: dict[str, int] = {
    "spark_jvm": 4,
    "commit": 3,
    "prepare": 2,
    "decide": 2,
    "python_worker": 1,
    "abort": 1,
    "recover": 1,
}

#: Relative frequencies: task kills most (they are the most varied), infrastructure less.
WEIGHTS: dict[FaultKind, int] = {
    FaultKind.KILL_TASK: 5,
    FaultKind.KILL_BROKER: 2,
    FaultKind.PAUSE_BROKER: 2,
    FaultKind.RESTART_POSTGRES: 2,
    FaultKind.DROP_CONNECTIONS: 2,
    FaultKind.CLEAR_TASK: 2,
}


@dataclass(frozen=True)
class Fault:
    """One scheduled fault.

    :param at_s: seconds after the nemesis starts.
    :param kind: what to break.
    :param target: for a task kill, which process kind (:data:`TASK_TARGETS`).
    :param pick: a number in [0, 1) that picks the victim among those available then.
    :param duration_s: how long the fault lasts (down, paused, dropped); 0 for instant ones.
    """

    index: int
    at_s: float
    kind: FaultKind
    target: str
    pick: float
    duration_s: float

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kind": self.kind.value}


def fault_schedule(
    seed: int, window_s: float, *, min_gap_s: float = 4.0, max_gap_s: float = 12.0
) -> list[Fault]:
    """The faults of a nemesis window of ``window_s`` seconds for ``seed``.

    Gaps are uniform in [``min_gap_s``, ``max_gap_s``); every kind appears at least once
    in the first ``len(FaultKind)`` faults (a shuffled round of every kind, then weighted
    draws), so even a short window exercises each.
    """
    rng = random.Random(seed)
    kinds = list(FaultKind)
    rng.shuffle(kinds)
    weighted = [k for k, w in WEIGHTS.items() for _ in range(w)]
    targets = [t for t, w in TASK_TARGETS.items() for _ in range(w)]
    faults: list[Fault] = []
    at = rng.uniform(min_gap_s, max_gap_s)
    while at < window_s:
        index = len(faults)
        kind = kinds[index] if index < len(kinds) else rng.choice(weighted)
        target = rng.choice(targets) if kind is FaultKind.KILL_TASK else ""
        duration = {
            FaultKind.KILL_BROKER: rng.uniform(1.0, 6.0),
            # Past the test brokers' 3 s session timeout: the controller fences the node.
            FaultKind.PAUSE_BROKER: rng.uniform(4.0, 9.0),
            FaultKind.DROP_CONNECTIONS: rng.uniform(2.0, 10.0),
        }.get(kind, 0.0)
        faults.append(Fault(index, round(at, 3), kind, target, rng.random(), round(duration, 3)))
        at += rng.uniform(min_gap_s, max_gap_s)
    return faults
