"""The soak in CI (marker ``soak``, at most 5 minutes), and its own parts unit-tested.

The short soak is the long one (:mod:`.run`) with 3 intervals, all at once, and a fixed
seed: the nemesis strikes for as long as a run is unfinished (every kind once in its first
six faults), then heal, settle, check. The unit tests prove that a seed fixes the schedule
and that the checker can fail: each anomaly it is built to see is seen and named first.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import time
from pathlib import Path

import pytest

from .checker import FinalState, find_anomalies, find_nemesis_anomalies
from .run import SoakConfig, run_soak
from .schedule import FaultKind, fault_schedule

#: The CI soak's seed; ``KAFKA2PC_SOAK_SEED`` replays another.
CI_SEED = 15
#: What the short soak must hit while runs are in flight: the two faults seed 15 strikes
#: once its runs have begun and before they can end (at 19 and 28 s). Its broker pause comes
#: at 10 s, before any task runs on a quiet machine, and its broker kill at 64 s, after the
#: runs ended on a quiet machine (they were done at 50 s once); its task kills and clear often
#: find nothing of their kind yet: all those are the long soak's to prove
#: (:data:`.run.LONG_MIN_HITS`).
CI_MIN_HITS = {"restart_postgres": 1, "drop_connections": 1}


def test_the_same_seed_gives_the_same_schedule() -> None:
    first, again = fault_schedule(2026, 600), fault_schedule(2026, 600)
    assert first == again
    assert first != fault_schedule(2027, 600)
    assert {f.kind for f in first[: len(FaultKind)]} == set(FaultKind)
    assert all(4.0 <= b.at_s - a.at_s < 12.0 for a, b in itertools.pairwise(first))
    assert first[-1].at_s < 600


def _clean() -> FinalState:
    days = ["20261101", "20261102"]
    keys = {f"{day}-{n:07d}": 1 for day in days for n in range(3)}
    return FinalState(
        days=days,
        rows_per_day=3,
        partitions=2,
        run_states=dict.fromkeys(days, "success"),
        batches=dict.fromkeys(days, ("COMMITTED", 3, 2)),
        other_batches=[],
        audit={"committed": 6, "aborted": 4, "open": 0, "non_transactional": 0, "extra_copies": 0},
        audit_unfinished=[],
        visible=dict(keys),
        stalled=[],
        java_records=6,
        java_keys=dict(keys),
    )


@pytest.mark.parametrize(
    ("change", "first"),
    [
        (
            {"visible": {**_clean().visible, "20261101-0000000": 2}},
            "read_committed consumer: 1 keys more than once, first 20261101-0000000",
        ),
        (
            {"java_keys": {k: 1 for k in list(_clean().visible)[1:]}, "java_records": 5},
            "Java console consumer: interval 20261101 has 2 records, not 3",
        ),
        (
            {"visible": {**_clean().visible, "20261103-0000000": 1}},
            "read_committed consumer: records of no exported interval: ['20261103']",
        ),
        ({"stalled": ["0"]}, "read_committed consumer stalled on ['0']"),
        (
            {"audit": {**_clean().audit, "open": 2, "committed": 6}},
            "log audit: 2 records in open transactions",
        ),
        (
            {"batches": {"20261101": ("ABORTED", 3, 2), "20261102": ("COMMITTED", 3, 2)}},
            "ledger: interval 20261101 is ABORTED, not COMMITTED",
        ),
        (
            {"open_transactions": ["p-0: Ongoing"]},
            "broker: transactions still open: ['p-0: Ongoing']",
        ),
        ({"leased": ["p-1 -> k"]}, "ledger: ids still leased: ['p-1 -> k']"),
        (
            {"run_states": {"20261101": "failed", "20261102": "success"}},
            "Airflow: the run of interval 20261101 is failed",
        ),
    ],
)
def test_the_checker_names_each_anomaly(change: dict, first: str) -> None:
    assert find_anomalies(_clean()) == []
    found = find_anomalies(dataclasses.replace(_clean(), **change))
    assert found and found[0] == first, found


def _strike(index: int, kind: str, *, hit: bool, in_flight: bool, **extra: str) -> dict:
    return {"index": index, "kind": kind, "hit": hit, "in_flight": in_flight, **extra}


@pytest.mark.parametrize(
    ("events", "min_hits", "expected"),
    [
        ([_strike(0, "kill_task", hit=True, in_flight=True)], {"kill_task": 1}, []),
        (
            [_strike(0, "kill_task", hit=False, in_flight=False)] * 3,
            {"kill_task": 1},
            ["nemesis: kill_task hit in-flight work 0 times, not >= 1 (3 strikes, 0 hits)"],
        ),
        (
            [_strike(0, "kill_broker", hit=True, in_flight=False)],
            {"kill_broker": 1},
            ["nemesis: kill_broker hit in-flight work 0 times, not >= 1 (1 strikes, 1 hits)"],
        ),
        (
            [],
            {"drop_connections": 1},
            ["nemesis: drop_connections hit in-flight work 0 times, not >= 1 (0 strikes, 0 hits)"],
        ),
        (
            [_strike(4, "pause_broker", hit=False, in_flight=False, error="TimeoutError()")],
            {},
            ["nemesis: fault 4 (pause_broker) raised: TimeoutError()"],
        ),
    ],
)
def test_the_checker_counts_hits_in_flight_not_strikes(
    events: list[dict], min_hits: dict[str, int], expected: list[str]
) -> None:
    assert find_nemesis_anomalies(events, min_hits) == expected


@pytest.mark.soak
@pytest.mark.cluster
@pytest.mark.slow
def test_short_soak_under_a_real_scheduler_is_exactly_once(tmp_path: Path) -> None:
    seed = int(os.environ.get("KAFKA2PC_SOAK_SEED", CI_SEED))
    config = SoakConfig(
        seed=seed,
        intervals=3,
        concurrency=3,
        rows=100,
        partitions=2,
        window_s=60.0,
        settle_s=240.0,
        workdir=tmp_path,
        min_hits=CI_MIN_HITS,
    )
    began = time.monotonic()
    result = run_soak(config)
    print(f"\nTIMING short soak: {time.monotonic() - began:.1f} s; figures {result.figures}")
    # result.ok includes the nemesis check: CI_MIN_HITS hits during in-flight work. How many
    # strikes there were is no evidence (the runs may end after five on a quiet machine).
    assert result.ok, result.failure()
