"""Interleaved rounds: every side once per round, the order rotating, after an untimed warm-up.

Why: the machine is shared and noisy. Running A B C, then B C A, then C A B ... puts every
side under the same drift and never always first (cold caches) or last; the warm-up pays
the first-time costs (broker JIT, class loading) outside the figures. The warm-up reads a
smaller dataset, so the benchmarks read the measured one through the page cache before
round 1 (:meth:`.data.Dataset.read_through`). Each run is verified as soon as it ends,
and no time is printed until every run was.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .cluster import Cluster
from .measure import Meter
from .verify import Expected, Verification, verify_topic


@dataclass(frozen=True)
class Round:
    """Which round a side runs in: ``label`` names its topics and files."""

    number: int  # 0 is the warm-up
    label: str

    @property
    def warmup(self) -> bool:
        return self.number == 0


@dataclass
class Run:
    """One side's measured run and the check of its output."""

    side: str
    rows: int
    meter: Meter
    verification: Verification | None
    #: Named phases (seconds) of this run, as the side can tell them apart.
    parts: dict[str, float] = field(default_factory=dict)
    #: Anything else the benchmark wants to report.
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.meter.seconds

    @property
    def cpu(self) -> float:
        return self.meter.cpu

    @property
    def broker_cpu(self) -> float | None:
        return self.meter.broker_cpu

    @property
    def broker_requests_cpu(self) -> float | None:
        """The broker's CPU in its network and request-handler threads (None: not seen)."""
        return self.meter.broker_threads.get("requests")

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("nan")

    def metric(self, name: str) -> float:
        """An attribute (seconds, cpu, broker_cpu, rate) or a named phase."""
        value = self.parts.get(name) if name in self.parts else getattr(self, name, None)
        return float("nan") if value is None else float(value)


#: A side: runs once for the round it is given and returns its verified run.
Side = Callable[[Round], Run]


@dataclass
class Results:
    sides: list[str]
    runs: dict[str, list[Run]]
    warmups: list[Run]
    load: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())

    def all_runs(self) -> list[Run]:
        return self.warmups + [r for side in self.sides for r in self.runs[side]]

    @property
    def verified(self) -> bool:
        return all(r.verification is None or r.verification.ok for r in self.all_runs())


def interleave(
    sides: Mapping[str, Side],
    rounds: int,
    *,
    warmup: bool = True,
    say: Callable[[str], None] = print,
) -> Results:
    """Run ``rounds`` rounds of every side (plus round 0, the warm-up, unless disabled)."""
    names = list(sides)
    results = Results(names, {n: [] for n in names}, [])
    load_start = os.getloadavg()
    for number in range(0 if warmup else 1, rounds + 1):
        label = "warmup" if number == 0 else f"r{number}"
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            run = sides[name](Round(number, label))
            (results.warmups if number == 0 else results.runs[name]).append(run)
            check = run.verification
            status = "no output checked here" if check is None else check.summary()
            say(f"  {label:<7} {name:<34} {status}")
    results.load = (load_start, os.getloadavg())
    return results


def checked(
    cluster: Cluster,
    side: str,
    meter: Meter,
    topic: str,
    expected: Expected,
    *,
    parts: dict[str, float] | None = None,
    info: dict[str, Any] | None = None,
) -> Run:
    """The run of ``side`` into ``topic``, verified against ``expected``; the topic is then
    deleted (fresh topics every run, and the broker's disk stays small)."""
    verification = verify_topic(cluster, topic, expected)
    cluster.delete_topics([topic])
    return Run(side, expected.rows, meter, verification, dict(parts or {}), dict(info or {}))
