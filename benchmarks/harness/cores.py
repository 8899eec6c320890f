"""Where each core's time goes: phases, idle core-seconds, and a per-core timeline of a run.

Why: two systems can spend the same CPU and still differ in wall time when one leaves
cores idle (waiting on the broker, on a single-threaded driver, on start-up). A phase's
idle core-seconds are its wall time times the machine's cores minus the CPU seconds the
system's processes and the broker used in it, read from the CPU samples the run's
:class:`~.measure.Meter` took (every 0.2 s; ``Meter.series``). For Spark systems the event
log's task spans also say which task held each of Spark's cores when (a task is put on the
first core free at its launch: Spark's local mode does not log the core itself).

Drawn two ways for each run: text (one line per core, one character per time slice) and
an SVG file with the same rows.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .spark import Phase

#: How busy a core was in a slice, from idle to full, in the text timeline.
SHADES = " .:-=+*#%@"
#: Columns of the text timeline.
WIDTH = 100


@dataclass(frozen=True)
class PhaseCost:
    name: str
    seconds: float
    cpu: float  # the system's processes and the broker
    idle: float  # core-seconds: seconds x cores - cpu (never below 0)
    in_tasks: float | None  # core-seconds Spark's tasks held (None: no task spans)


@dataclass
class CoreTimeline:
    """One run: its phases, CPU samples and (Spark) task spans, from start to end."""

    side: str
    start_ms: float
    end_ms: float
    cores: int
    phases: Sequence[Phase]
    #: (epoch ms, CPU s of the system's processes so far, CPU s of the broker so far)
    series: Sequence[tuple[float, float, float]]
    #: (launch ms, finish ms, label) of each Spark task.
    tasks: Sequence[tuple[float, float, str]] = ()
    #: Spark's task slots (``local[N]``); the machine's cores when None.
    slots: int | None = None
    lanes: list[list[tuple[float, float, str]]] = field(init=False)

    def __post_init__(self) -> None:
        self.lanes = assign_lanes(self.tasks, self.slots or self.cores)

    @property
    def seconds(self) -> float:
        return (self.end_ms - self.start_ms) / 1000

    def cpu_between(self, start_ms: float, end_ms: float) -> float:
        """CPU seconds (system + broker) used between two instants, interpolated."""
        return _at(self.series, end_ms) - _at(self.series, start_ms)

    def costs(self) -> list[PhaseCost]:
        """Per phase name (spans of one name summed), in first-seen order, then the total."""
        out: dict[str, list[float]] = {}
        for phase in self.phases:
            start, end = max(phase.start_ms, self.start_ms), min(phase.end_ms, self.end_ms)
            if end <= start:
                continue
            acc = out.setdefault(phase.name, [0.0, 0.0, 0.0])
            acc[0] += (end - start) / 1000
            acc[1] += self.cpu_between(start, end)
            acc[2] += self._task_core_seconds(start, end)
        rows = [self._cost(name, *acc) for name, acc in out.items()]
        total = self._cost(
            "whole run",
            self.seconds,
            self.cpu_between(self.start_ms, self.end_ms),
            self._task_core_seconds(self.start_ms, self.end_ms),
        )
        return [*rows, total]

    def _cost(self, name: str, seconds: float, cpu: float, tasks: float) -> PhaseCost:
        idle = max(0.0, seconds * self.cores - cpu)
        return PhaseCost(name, seconds, cpu, idle, tasks if self.tasks else None)

    def _task_core_seconds(self, start: float, end: float) -> float:
        return sum(max(0.0, min(e, end) - max(s, start)) for s, e, _ in self.tasks) / 1000

    # -- drawing -------------------------------------------------------------------------

    def text(self, width: int = WIDTH) -> list[str]:
        """Per core: CPU shade per slice (the broker's CPU included, filled core by core);
        for Spark, per task slot the stage whose task held it; then the phases."""
        step = (self.end_ms - self.start_ms) / width
        edges = [self.start_ms + i * step for i in range(width + 1)]
        used = [self.cpu_between(a, b) / (step / 1000) for a, b in itertools.pairwise(edges)]
        lines = [f"{self.side}: {self.seconds:.1f} s, one column = {step / 1000:.2f} s"]
        for core in range(self.cores):
            shade = "".join(_shade(min(1.0, max(0.0, u - core))) for u in used)
            lines.append(f"  CPU core {core + 1}  |{shade}|")
        stages = sorted({label for _, _, label in self.tasks}, key=_stage_number)
        letters = {label: chr(ord("A") + i % 26) for i, label in enumerate(stages)}
        for core, lane in enumerate(self.lanes):
            cells = []
            for a, b in itertools.pairwise(edges):
                held = max(lane, key=lambda t: _overlap(t, a, b), default=None)
                cells.append(letters[held[2]] if held and _overlap(held, a, b) > step / 2 else " ")
            lines.append(f"  task slot {core + 1} |{''.join(cells)}|")
        names = list(dict.fromkeys(p.name for p in self.phases))
        marks = {name: str(i % 10) for i, name in enumerate(names)}
        if self.phases:
            row = []
            for a, b in itertools.pairwise(edges):
                phase = max(self.phases, key=lambda p: _overlap((p.start_ms, p.end_ms), a, b))
                span = (phase.start_ms, phase.end_ms)
                row.append(marks[phase.name] if _overlap(span, a, b) else " ")
            lines.append(f"  phase       |{''.join(row)}|")
            lines.append("    phases: " + ", ".join(f"{marks[n]} {n}" for n in names))
        if stages:
            lines.append("    tasks: " + ", ".join(f"{letters[s]} {s}" for s in stages))
        lines.append(f"    CPU shades from idle to a full core: {SHADES!r}")
        return lines


def assign_lanes(
    tasks: Sequence[tuple[float, float, str]], slots: int
) -> list[list[tuple[float, float, str]]]:
    """Each task on the first of Spark's ``slots`` free at its launch, else on the one that
    frees first: the log's finish time is when the driver recorded the end, which on a
    loaded machine can come after the next task on that core was launched."""
    lanes: list[list[tuple[float, float, str]]] = [[] for _ in range(slots)] if tasks else []
    for task in sorted(tasks):
        free = next((lane for lane in lanes if not lane or lane[-1][1] <= task[0]), None)
        if free is None:
            free = min(lanes, key=lambda lane: lane[-1][1])
        free.append(task)
    return lanes


def print_costs(timelines: Sequence[CoreTimeline], say: Callable[[str], None] = print) -> None:
    """Per system: each phase's wall, CPU (system + broker), idle core-seconds and, for
    Spark, the core-seconds its tasks held."""
    for tl in timelines:
        say(f"  {tl.side} ({tl.cores} cores; CPU = its processes + the broker):")
        for cost in tl.costs():
            tasks = "" if cost.in_tasks is None else f", in tasks {cost.in_tasks:6.1f} core-s"
            say(
                f"    {cost.name:<48} {cost.seconds:6.1f} s  CPU {cost.cpu:6.1f} s  "
                f"idle {cost.idle:6.1f} core-s{tasks}"
            )


def write_svg(timelines: Sequence[CoreTimeline], path: Path, title: str) -> Path:
    """The runs of one round, one block each: a row per core (CPU shade per 0.2 s sample
    interval, Spark's tasks as bars) on one time axis from each run's own start."""
    scale = 900 / max((tl.seconds for tl in timelines), default=1.0)  # px per second
    row, y = 14, 30
    parts = [f'<text x="10" y="18" font-size="13">{html.escape(title)}</text>']
    for tl in timelines:
        parts.append(f'<text x="10" y="{y + 11}" font-size="12">{html.escape(tl.side)}</text>')
        y += row + 2
        for core in range(tl.cores):
            parts.append(f'<text x="10" y="{y + 10}" font-size="10">CPU {core + 1}</text>')
            for (t0, c0, b0), (t1, c1, b1) in itertools.pairwise(tl.series):
                if t1 <= tl.start_ms or t0 >= tl.end_ms or t1 <= t0:
                    continue
                busy = min(1.0, max(0.0, ((c1 + b1) - (c0 + b0)) / ((t1 - t0) / 1000) - core))
                x = 80 + (t0 - tl.start_ms) / 1000 * scale
                w = (t1 - t0) / 1000 * scale
                parts.append(
                    f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 2}" '
                    f'fill="#3465a4" fill-opacity="{busy:.2f}"/>'
                )
            y += row
        for core, lane in enumerate(tl.lanes):
            parts.append(f'<text x="10" y="{y + 10}" font-size="10">slot {core + 1}</text>')
            for s, e, label in lane:
                x = 80 + (s - tl.start_ms) / 1000 * scale
                w = max(0.5, (e - s) / 1000 * scale)
                parts.append(
                    f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 2}" '
                    f'fill="#73d216" stroke="#4e9a06"><title>{html.escape(label)}</title></rect>'
                )
            y += row
        for phase in tl.phases:
            x = 80 + (phase.start_ms - tl.start_ms) / 1000 * scale
            parts.append(
                f'<line x1="{x:.1f}" y1="{y - row * (tl.cores + len(tl.lanes))}" x2="{x:.1f}" '
                f'y2="{y}" stroke="#cc0000" stroke-width="0.5"><title>{html.escape(phase.name)}'
                "</title></line>"
            )
        y += 10
    width = 80 + 900 + 20
    path.write_text(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y + 10}" '
        f'font-family="monospace">{"".join(parts)}</svg>\n'
    )
    return path


def _at(series: Sequence[tuple[float, float, float]], t: float) -> float:
    """Cumulative CPU (system + broker) at ``t``, linear between samples."""
    if not series:
        return 0.0
    if t <= series[0][0]:
        return series[0][1] + series[0][2]
    for (t0, c0, b0), (t1, c1, b1) in itertools.pairwise(series):
        if t0 <= t <= t1:
            f = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
            return c0 + b0 + f * ((c1 + b1) - (c0 + b0))
    return series[-1][1] + series[-1][2]


def _overlap(span: tuple[float, float] | tuple[float, float, str], a: float, b: float) -> float:
    return max(0.0, min(span[1], b) - max(span[0], a))


def _shade(fraction: float) -> str:
    return SHADES[min(len(SHADES) - 1, round(fraction * (len(SHADES) - 1)))]


def _stage_number(label: str) -> int:
    tail = label.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0
