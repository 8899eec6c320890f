"""Tables every benchmark prints the same way: runs, phases, ratios, verification.

Why ratios: absolute seconds on this machine kind vary twofold between machines and with
other people's load; ratios of sides measured in the same round survive it far better, so
each ratio is computed per round and its median reported.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence

from .rounds import Results, Run

Say = Callable[[str], None]
#: What every ratio table shows: wall, CPU of the side's processes, the broker's whole CPU,
#: and the part of it in the threads that serve requests (the rest runs when idle too).
METRICS = ("seconds", "cpu", "broker_cpu", "broker_requests_cpu")


def median(values: Sequence[float]) -> float:
    clean = [v for v in values if v == v]  # drop NaN
    return statistics.median(clean) if clean else float("nan")


def fmt(value: float, spec: str = ".2f") -> str:
    return "-" if value != value else format(value, spec)


def print_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    say: Say = print,
    indent: int = 2,
    left: Sequence[int] = (0,),
) -> None:
    """Columns ``left`` (the first) left-aligned, the others right-aligned (numbers)."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        cells = [
            str(c).ljust(w) if i in left else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        say(" " * indent + "  ".join(cells).rstrip())


def machine_line(results: Results | None = None) -> str:
    """CPUs and load average: the context every figure needs on a shared machine."""
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    text = f"{os.cpu_count()} CPUs, load average now {load}"
    if results is not None and results.load[0]:
        text += f" (at start {results.load[0][0]:.1f})"
    return text


def print_runs(results: Results, say: Say = print) -> None:
    """Per side: medians of wall time, rate, CPU and broker CPU (all, and in its request
    threads), then every round's wall."""
    rounds = max(len(v) for v in results.runs.values())
    headers = ["side", "wall s", "rec/s", "CPU s", "broker CPU s", "in requests"]
    headers += [f"r{i + 1} wall s" for i in range(rounds)]
    rows = []
    for side in results.sides:
        runs = results.runs[side]
        rows.append(
            [
                side,
                fmt(median([r.seconds for r in runs])),
                fmt(median([r.rate for r in runs]), ",.0f"),
                fmt(median([r.cpu for r in runs]), ".1f"),
                fmt(median([r.metric("broker_cpu") for r in runs]), ".1f"),
                fmt(median([r.metric("broker_requests_cpu") for r in runs]), ".1f"),
                *[fmt(r.seconds) for r in runs],
            ]
        )
    print_table(headers, rows, say)


def print_parts(results: Results, sides: Sequence[str] | None = None, say: Say = print) -> None:
    """Per side: the median of each named phase, of CPU by process group, of the largest
    peak resident memory of one process in each group, and of the broker's CPU by kind of
    thread."""
    for side in sides or results.sides:
        runs = results.runs[side]
        names = list(dict.fromkeys(name for r in runs for name in r.parts))
        if names:
            phases = ", ".join(
                f"{n} {fmt(median([r.parts.get(n, float('nan')) for r in runs]))}" for n in names
            )
            say(f"  {side}: {phases} (s, medians)")
        cpu = _medians(runs, lambda r: r.meter.cpu_groups, ".1f")
        if cpu:
            label = "CPU s by process" if names else f"{side}: CPU s by process"
            say(f"    {label}: {cpu}")
        rss = _medians(runs, lambda r: r.meter.peak_rss_mib, ".0f")
        if rss:
            say(f"    largest process's peak RSS MiB: {rss}")
        threads = _medians(runs, lambda r: r.meter.broker_threads, ".1f")
        if threads:
            say(f"    broker CPU s by thread: {threads}")


def _medians(runs: Sequence[Run], values: Callable[[Run], dict[str, float]], spec: str) -> str:
    """``"name median, ..."`` over every name a run has (0 where a run lacks it)."""
    names = list(dict.fromkeys(name for r in runs for name in values(r)))
    return ", ".join(
        f"{name} {fmt(median([values(r).get(name, 0.0) for r in runs]), spec)}" for name in names
    )


def ratios(results: Results, a: str, b: str, metric: str = "seconds") -> list[float]:
    """``a`` / ``b`` of ``metric``, per round."""
    return [
        x.metric(metric) / y.metric(metric) if y.metric(metric) else float("nan")
        for x, y in zip(results.runs[a], results.runs[b], strict=True)
    ]


def print_ratios(
    results: Results,
    pairs: Sequence[tuple[str, str]],
    metrics: Sequence[str] = METRICS,
    say: Say = print,
) -> None:
    """One row per pair and metric: the median of the per-round ratios, then each round's."""
    labels = {
        "seconds": "wall",
        "cpu": "CPU",
        "broker_cpu": "broker CPU",
        "broker_requests_cpu": "broker request CPU",
        "rate": "rec/s",
    }
    rows = []
    for a, b in pairs:
        for metric in metrics:
            per_round = ratios(results, a, b, metric)
            rows.append(
                [
                    f"{a} / {b}",
                    labels.get(metric, metric),
                    fmt(median(per_round), ".3f"),
                    " ".join(fmt(r, ".3f") for r in per_round),
                ]
            )
    print_table(["ratio", "of", "median", "per round"], rows, say)


def print_verification(results: Results, say: Say = print) -> bool:
    """One line per run (the warm-up included); True when every checked output passed."""
    for run in results.all_runs():
        check = run.verification
        if check is None:
            say(f"  verified -      {run.side}: nothing to check (no output)")
        else:
            status = "OK" if check.ok else "FAILED"
            say(f"  verified {status:<6} {run.side}: {check.topic} ({check.summary()})")
    return results.verified


def same_partition_counts(runs: Sequence[Run]) -> tuple[bool, str]:
    """Whether every run's output has the same records per partition (same keys, same
    partitioner), and the counts."""
    counts = {tuple(r.verification.partition_counts) for r in runs if r.verification is not None}
    shown = "; ".join(str(list(c)) for c in counts)
    return len(counts) == 1, shown


def print_results(
    results: Results,
    title: str,
    pairs: Sequence[tuple[str, str]] = (),
    metrics: Sequence[str] = METRICS,
    *,
    legend: Sequence[str] = (),
    verification: bool = True,
    say: Say = print,
) -> bool:
    """The closing report: every run's verification first (no time is shown before it),
    then the runs, their phases and the ratios. True when every checked output passed."""
    ok = True
    if verification:
        say("\nverification (log audit, read_committed, digest of keys and values):")
        ok = print_verification(results, say)
        if not ok:
            say("NOT VERIFIED: the times below are not comparable")
    say(f"\n{title}; {machine_line(results)}")
    for line in legend:
        say(f"  {line}")
    print_runs(results, say)
    print_parts(results, say=say)
    if pairs:
        print_ratios(results, pairs, metrics, say)
    return ok
