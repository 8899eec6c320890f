"""The soak in CI (marker ``soak``, at most 7 minutes), and its own parts unit-tested.

The short soak is the long one (:mod:`.run`) with 3 intervals, all at once, one per export
(the example DAG by the JVM writer, a multi-topic export by the Python writer, a registry
Avro export), and a fixed seed: the nemesis strikes for as long as a run is unfinished
(every kind once in its first six faults, the task kill and the broker faults aimed at
work in flight), then heal, settle, check every topic. The unit tests prove that a seed
fixes the schedule, that a strike is classified against its own export's windows of work,
that a task kill aims at a prepare's JVM that writes, and that the checker can fail: each
anomaly it is built to see is seen and named first.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import time
from pathlib import Path

import pytest

from .aim import Jvm, OpenTxn, choose
from .checker import FinalState, TopicState, find_anomalies, find_nemesis_anomalies
from .exports import KINDS, assign_days, dag_source, plan_exports
from .flight import Window, classify_strikes, work_at
from .procs import is_driver_jvm
from .run import SoakConfig, run_soak, unfinished
from .schedule import FaultKind, fault_schedule

#: The CI soak's seed; ``KAFKA2PC_SOAK_SEED`` replays another. Seed 15280 strikes the five
#: faults that must land on work first: a task kill of a prepare's spark-submit JVM (the
#: driver hosting the executors: the JVM writer's producers), then a broker kill, the
#: ledger's restart, the proxies' drop and a broker pause; then a clear. All five are aimed:
#: the task kill waits for a prepare's driver JVM that writes (an open transaction of its
#: own export and interval, first seen after the JVM started; after 30 s, any driver JVM
#: 10 s into its prepare: :mod:`.aim`), and its run retries the prepare, which keeps work in
#: flight for the others; they wait for an open transaction of an export and the broker
#: faults strike its coordinator. (Seed 383, broker faults first, ran out of work on a quiet
#: machine before its task kill.)
CI_SEED = 15280
#: What the short soak must hit on work in flight (an export's own prepare, commit or open
#: transaction at the moment of the strike; :mod:`.flight`): the five aimed faults above.
#: The task kill once struck spark-class's launcher JVM (it names ``SparkSubmit`` too and
#: lives a second: ``MISS: had already exited`` on a busy machine); it now strikes only a
#: live driver JVM of a running prepare, chosen again if it ends before the signal. A clear
#: needs a finished task, not work: the long soak's to prove (:data:`.run.LONG_MIN_HITS`).
CI_MIN_HITS = {
    "kill_task": 1,
    "kill_broker": 1,
    "pause_broker": 1,
    "restart_postgres": 1,
    "drop_connections": 1,
}


def test_the_same_seed_gives_the_same_schedule() -> None:
    first, again = fault_schedule(2026, 600), fault_schedule(2026, 600)
    assert first == again
    assert first != fault_schedule(2027, 600)
    assert {f.kind for f in first[: len(FaultKind)]} == set(FaultKind)
    assert all(4.0 <= b.at_s - a.at_s < 12.0 for a, b in itertools.pairwise(first))
    assert first[-1].at_s < 600


def _topic(name: str, keys: dict[str, int], expected: dict[str, int]) -> TopicState:
    records = sum(expected.values())
    return TopicState(
        topic=name,
        expected=expected,
        audit={
            "committed": records,
            "aborted": 4,
            "open": 0,
            "non_transactional": 0,
            "extra_copies": 0,
        },
        audit_unfinished=[],
        visible=dict(keys),
        stalled=[],
        java_records=records,
        java_keys=dict(keys),
    )


def _clean() -> FinalState:
    """Day 1 by the one-topic export (3 records in ``t``), day 2 by the multi-topic one (2
    records in ``a``, 1 in ``b``)."""
    days = {"20261101": "jvm", "20261102": "multi"}
    one = {f"20261101-{n:07d}": 1 for n in range(3)}
    a = {"20261102-0000000": 1, "20261102-0000002": 1}
    return FinalState(
        days=days,
        rows_per_day=3,
        partitions=2,
        run_states=dict.fromkeys(days, "success"),
        batches=dict.fromkeys(days, ("COMMITTED", 3, 2)),
        other_batches=[],
        topics=[
            _topic("t", one, {"20261101": 3}),
            _topic("a", a, {"20261102": 2}),
            _topic("b", {"20261102-0000001": 1}, {"20261102": 1}),
        ],
    )


def _in(state: FinalState, index: int, **change) -> FinalState:
    """``state`` with topic ``index`` changed."""
    topics = list(state.topics)
    topics[index] = dataclasses.replace(topics[index], **change)
    return dataclasses.replace(state, topics=topics)


@pytest.mark.parametrize(
    ("topic", "change", "first"),
    [
        (
            0,
            {"visible": {**_clean().topics[0].visible, "20261101-0000000": 2}},
            "t: read_committed consumer: 1 keys more than once, first 20261101-0000000",
        ),
        (
            0,
            {"java_keys": {k: 1 for k in list(_clean().topics[0].visible)[1:]}},
            "t: Java console consumer: interval 20261101 has 2 records, not 3",
        ),
        (
            2,  # the second topic of the multi-topic export lost its record
            {"visible": {}},
            "b: read_committed consumer: interval 20261102 has 0 records, not 1",
        ),
        (
            1,  # a record routed to the wrong topic of its export
            {"visible": {**_clean().topics[1].visible, "20261101-0000009": 1}},
            "a: read_committed consumer: records of no interval exported here: ['20261101']",
        ),
        (1, {"stalled": ["0"]}, "a: read_committed consumer stalled on ['0']"),
        (
            2,
            {"audit": {**_clean().topics[2].audit, "open": 2}},
            "b: log audit: 2 records in open transactions",
        ),
        (
            2,
            {"audit": {**_clean().topics[2].audit, "committed": 0}},
            "b: log audit: 0 records committed, not 1",
        ),
    ],
)
def test_the_checker_names_each_anomaly_of_a_topic(topic: int, change: dict, first: str) -> None:
    assert find_anomalies(_clean()) == []
    found = find_anomalies(_in(_clean(), topic, **change))
    assert found and found[0] == first, found


@pytest.mark.parametrize(
    ("change", "first"),
    [
        (
            {"batches": {"20261101": ("ABORTED", 3, 2), "20261102": ("COMMITTED", 3, 2)}},
            "ledger: interval 20261101 (jvm) is ABORTED, not COMMITTED",
        ),
        (
            {"batches": {"20261101": ("COMMITTED", 3, 2), "20261102": None}},
            "ledger: no batch for interval 20261102 (multi)",
        ),
        (
            {"open_transactions": ["p-0: Ongoing"]},
            "broker: transactions still open: ['p-0: Ongoing']",
        ),
        ({"leased": ["p-1 -> k"]}, "ledger: ids still leased: ['p-1 -> k']"),
        (
            {"run_states": {"20261101": "success", "20261102": "failed"}},
            "Airflow: the run of interval 20261102 (multi) is failed",
        ),
    ],
)
def test_the_checker_names_each_anomaly_of_the_ledger_and_airflow(change: dict, first: str) -> None:
    found = find_anomalies(dataclasses.replace(_clean(), **change))
    assert found and found[0] == first, found


def _window(export: str, day: str, phase: str, start: float, end: float | None) -> Window:
    return Window(export, day, phase, start, end, "")


WINDOWS = [
    _window("jvm", "20261101", "prepare", 10.0, 20.0),
    _window("jvm", "20261101", "open", 15.0, 30.0),
    _window("multi", "20261102", "commit", 40.0, None),
]


@pytest.mark.parametrize(
    ("moment", "own", "expected"),
    [
        (12.0, None, ["jvm 20261101 prepare"]),
        (25.0, None, ["jvm 20261101 open"]),
        (35.0, None, []),  # between the jvm export's work and the multi one's commit
        (99.0, None, ["multi 20261102 commit"]),  # a commit still running at the end
        (25.0, ("multi", "20261102"), []),  # a task kill counts on its own export only
        (25.0, ("jvm", "20261102"), []),  # ... and its own interval
        (18.0, ("jvm", "20261101"), ["jvm 20261101 prepare", "jvm 20261101 open"]),
    ],
)
def test_a_strike_is_in_flight_only_inside_its_exports_windows(moment, own, expected) -> None:
    export, interval = own or (None, None)
    found = work_at(WINDOWS, moment, export=export, interval=interval)
    assert [f"{w.export} {w.interval} {w.phase}" for w in found] == expected


def test_classify_strikes_counts_hits_only() -> None:
    events = [
        {"kind": "kill_broker", "hit": True, "moment": 25.0},
        {"kind": "pause_broker", "hit": False, "moment": 25.0},
        {"kind": "kill_task", "hit": True, "moment": 25.0, "own": ["multi", "20261102"]},
        {"kind": "kill_task", "hit": False},
    ]
    classify_strikes(events, WINDOWS)
    assert [e["in_flight"] for e in events] == [True, False, False, False]
    assert events[0]["work"] == ["jvm 20261101 open ()"]


JVMS = [Jvm(20, "jvm", "20261101", 100.0), Jvm(10, "avro", "20261103", 104.0)]


@pytest.mark.parametrize(
    ("open_txns", "waited_s", "expected"),
    [
        # the jvm export's interval has a transaction its JVM opened: it writes
        ([OpenTxn("jvm", "20261101", "j-0", 130.0)], 0.0, [20]),
        # an earlier try's transaction, still open: not this JVM's work (yet), so wait
        ([OpenTxn("jvm", "20261101", "j-0", 90.0)], 0.0, []),
        # another interval's, or another export's: not its work
        ([OpenTxn("jvm", "20261102", "j-0", 130.0)], 0.0, []),
        ([OpenTxn("multi", "20261101", "m-0", 130.0)], 0.0, []),
        # patience spent, nobody writes: any JVM 10 s into its prepare (pid order)
        ([], 30.0, [10, 20]),
        # ... but a writer still comes first
        ([OpenTxn("avro", "20261103", "a-1", 120.0)], 45.0, [10]),
    ],
)
def test_a_task_kill_aims_at_a_prepare_jvm_that_writes(open_txns, waited_s, expected) -> None:
    chosen = choose(JVMS, open_txns, now=140.0, waited_s=waited_s, patience_s=30.0, min_age_s=10.0)
    assert [jvm.pid for jvm, _ in chosen] == expected
    assert all(why for _, why in chosen)


def test_a_task_kill_waits_for_a_jvm_past_its_start_up() -> None:
    young = [Jvm(30, "jvm", "20261101", 135.0)]
    assert choose(young, [], now=140.0, waited_s=50.0, patience_s=30.0, min_age_s=10.0) == []


@pytest.mark.parametrize(
    ("cmdline", "driver"),
    [
        (
            "/usr/lib/jvm/java-17-openjdk-amd64/bin/java -cp /spark/conf:/spark/jars/* "
            "-Xmx1g org.apache.spark.deploy.SparkSubmit --master local[2] app.py",
            True,
        ),
        # spark-class's launcher JVM: names the driver class, lives a second
        (
            "java -Xmx128m -cp /spark/jars/* org.apache.spark.launcher.Main "
            "org.apache.spark.deploy.SparkSubmit --master local[2] app.py",
            False,
        ),
        # the spark-class shell before it execs the JVM (and its subshell)
        ("bash /spark/bin/spark-class org.apache.spark.deploy.SparkSubmit app.py", False),
        # the Python driver the JVM runs
        ("/venv/bin/python /pkg/spark/app.py --spec-file x", False),
        ("", False),
    ],
)
def test_only_spark_submits_own_jvm_is_the_driver(cmdline: str, driver: bool) -> None:
    assert is_driver_jvm(cmdline) is driver


def test_the_exports_share_the_intervals_and_route_rows_among_topics() -> None:
    exports = plan_exports(KINDS, "orders-x", "s")
    assert [(e.kind, e.writer, e.registry) for e in exports] == [
        ("jvm", "jvm", False),
        ("multi", "python", False),
        ("avro", "jvm", True),
    ]
    multi = exports[1]
    assert multi.per_topic(101) == {"multi-a-s": 51, "multi-b-s": 50}
    assert multi.owns("orders_multi.export_orders-3") and not exports[0].owns(
        "orders_multi.export_orders-3"
    )
    days = [f"d{i}" for i in range(7)]
    blocks = assign_days(days, exports)
    assert blocks == {
        "orders_export": ["d0", "d1", "d2"],
        "orders_multi": ["d3", "d4", "d5"],
        "orders_avro": ["d6"],
    }
    assert assign_days(days[:3], exports) == {
        "orders_export": ["d0"],
        "orders_multi": ["d1"],
        "orders_avro": ["d2"],
    }
    for export in exports[1:]:
        source = dag_source(
            export, rows=100, partitions=2, start="2026-11-01", retries=6, delay_s=5.0
        )
        compile(source, export.dag_id, "exec")
        assert "{{ data_interval_start | ds_nodash }}" in source
    assert "topic_column" in dag_source(
        multi, rows=100, partitions=2, start="2026-11-01", retries=6, delay_s=5.0
    )


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
        exports=KINDS,
    )
    began = time.monotonic()
    result = run_soak(config)
    print(f"\nTIMING short soak: {time.monotonic() - began:.1f} s; figures {result.figures}")
    # result.ok includes the nemesis check: CI_MIN_HITS hits on work in flight, each
    # against its export's windows; every topic of every export by both witnesses; each
    # export's prepare by its writer (python and jvm). How many strikes there were is no
    # evidence (the runs may end after six on a quiet machine).
    assert result.ok, result.failure()
    assert set(result.figures["exports"]) == set(KINDS), result.figures
    assert len(result.figures["topics"]) == 4, result.figures


def _view(tid: str, state: str, committed: int, expected: int = 10) -> dict:
    return {
        "transactional_id": tid,
        "producer_id": 7,
        "state": state,
        "committed": committed,
        "expected": expected,
    }


@pytest.mark.parametrize(
    ("views", "expected"),
    [
        # one transaction over two topics: 6 + 4 of 10 committed is complete
        ([_view("m-0", "COMMITTED", 6), _view("m-0", "COMMITTED", 4)], []),
        ([_view("m-0", "COMMITTED", 6), _view("m-0", "MISSING", 0)], ["m-0: COMMITTED, 6 of 10"]),
        ([_view("m-0", "COMMITTED", 6), _view("m-0", "OPEN", 0)], ["m-0: COMMITTED/OPEN, 6 of 10"]),
        ([_view("s-0", "COMMITTED", 10)], []),
    ],
)
def test_a_multi_topic_transaction_is_judged_over_its_topics(views, expected) -> None:
    assert unfinished(views) == expected
