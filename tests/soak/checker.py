"""The soak's checker: the final state, read from every witness, against what must hold.

:func:`find_anomalies` is pure (a :class:`FinalState` in, anomalies out, in a fixed order),
so what it flags is tested without a cluster (``test_soak.py``). :func:`read_final_state`
asks the real witnesses: the ledger, the log audit (commit/abort markers applied by us), a
read_committed consumer, Kafka's Java console consumer, ListTransactions.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class TopicState:
    """One topic's witnesses: what each interval must have there, and what was seen."""

    topic: str
    #: day -> records this topic must hold of that interval
    expected: dict[str, int]
    #: the log audit's totals (committed, aborted, open, non_transactional) and extra copies
    audit: dict[str, int]
    #: the log audit's committables that are not COMMITTED and complete
    audit_unfinished: list[str]
    #: read_committed consumer: key -> copies, and the partitions it found stalled
    visible: dict[str, int]
    stalled: list[str]
    #: Kafka's Java console consumer: records and key -> copies (None if it did not run)
    java_records: int | None
    java_keys: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        state = asdict(self)
        # Keys are many; the history keeps their counts, not the keys themselves.
        state["visible"] = {"records": sum(self.visible.values()), "keys": len(self.visible)}
        state["java_keys"] = {"keys": len(self.java_keys)}
        return state


@dataclass
class FinalState:
    """Everything the checker judges, as plain data (it goes into the history)."""

    #: The interval days (``yyyymmdd``) the soak exported -> the export that exported it.
    days: dict[str, str]
    rows_per_day: int
    partitions: int
    #: day -> final DAG run state
    run_states: dict[str, str]
    #: day -> (batch state, source rows, participants) or None when the ledger has none
    batches: dict[str, tuple[str, int | None, int] | None]
    #: "<export> <run key>" of batches in the ledger that are no interval of that export
    other_batches: list[str]
    #: every topic of every export, each with both witnesses (and the Java one)
    topics: list[TopicState]
    #: transactions of the exports still open on the broker, ids still leased
    open_transactions: list[str] = field(default_factory=list)
    leased: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        state = asdict(self)
        state["topics"] = [t.to_dict() for t in self.topics]
        return state


def _per_day(keys: dict[str, int]) -> tuple[Counter[str], list[str]]:
    """Records per day (keys ``<yyyymmdd>-<n>``) and keys seen more than once."""
    days: Counter[str] = Counter()
    for key, copies in keys.items():
        days[key.split("-")[0]] += copies
    return days, sorted(k for k, n in keys.items() if n > 1)


def _consumer_anomalies(topic: TopicState) -> list[str]:
    """Duplicates and losses seen by the consumers of one topic."""
    found: list[str] = []
    for name, keys in (
        ("read_committed consumer", topic.visible),
        ("Java console consumer", topic.java_keys),
    ):
        if name.startswith("Java") and topic.java_records is None:
            continue
        per_day, twice = _per_day(keys)
        if twice:
            found.append(
                f"{topic.topic}: {name}: {len(twice)} keys more than once, first {twice[0]}"
            )
        for day, rows in sorted(topic.expected.items()):
            if per_day.get(day, 0) != rows:
                found.append(
                    f"{topic.topic}: {name}: interval {day} has {per_day.get(day, 0)} records, "
                    f"not {rows}"
                )
        strays = sorted(set(per_day) - set(topic.expected))
        if strays:
            found.append(f"{topic.topic}: {name}: records of no interval exported here: {strays}")
    expected = sum(topic.expected.values())
    if topic.java_records is not None and topic.java_records != expected:
        found.append(
            f"{topic.topic}: Java console consumer: {topic.java_records} records, not {expected}"
        )
    if topic.stalled:
        found.append(f"{topic.topic}: read_committed consumer stalled on {topic.stalled}")
    return found


def _audit_anomalies(topic: TopicState) -> list[str]:
    found: list[str] = []
    audit, expected, name = topic.audit, sum(topic.expected.values()), topic.topic
    if audit.get("committed") != expected:
        found.append(
            f"{name}: log audit: {audit.get('committed')} records committed, not {expected}"
        )
    if audit.get("extra_copies"):
        found.append(f"{name}: log audit: {audit['extra_copies']} duplicate committed copies")
    if audit.get("open"):
        found.append(f"{name}: log audit: {audit['open']} records in open transactions")
    if audit.get("non_transactional"):
        found.append(
            f"{name}: log audit: {audit['non_transactional']} records outside any transaction"
        )
    if topic.audit_unfinished:
        found.append(
            f"{name}: log audit: committables not committed in full: {topic.audit_unfinished}"
        )
    return found


def find_anomalies(state: FinalState) -> list[str]:
    """Every way ``state`` is not exactly once, first the gravest: duplicates and losses
    seen by the consumers (every topic), then the audit, then the ledger and the leftovers."""
    found: list[str] = []
    for topic in state.topics:
        found += _consumer_anomalies(topic)
    for topic in state.topics:
        found += _audit_anomalies(topic)
    for day, export in sorted(state.days.items()):
        batch = state.batches.get(day)
        if batch is None:
            found.append(f"ledger: no batch for interval {day} ({export})")
            continue
        batch_state, source_rows, participants = batch
        if batch_state != "COMMITTED":
            found.append(f"ledger: interval {day} ({export}) is {batch_state}, not COMMITTED")
        if source_rows != state.rows_per_day:
            found.append(f"ledger: interval {day} ({export}) has {source_rows} source rows")
        if participants != state.partitions:
            found.append(f"ledger: interval {day} ({export}) has {participants} participants")
    if state.other_batches:
        found.append(f"ledger: batches of no exported interval: {state.other_batches}")
    if state.open_transactions:
        found.append(f"broker: transactions still open: {state.open_transactions}")
    if state.leased:
        found.append(f"ledger: ids still leased: {state.leased}")
    for day, export in sorted(state.days.items()):
        if state.run_states.get(day) != "success":
            found.append(
                f"Airflow: the run of interval {day} ({export}) is {state.run_states.get(day)}"
            )
    return found


def tally_strikes(events: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per fault kind: strikes, hits, and hits during in-flight work (the report's table)."""
    tally: dict[str, dict[str, int]] = {}
    for event in events:
        row = tally.setdefault(event["kind"], {"strikes": 0, "hits": 0, "in_flight": 0})
        row["strikes"] += 1
        row["hits"] += bool(event.get("hit"))
        row["in_flight"] += bool(event.get("in_flight"))
    return dict(sorted(tally.items()))


def find_nemesis_anomalies(events: list[dict[str, Any]], min_hits: dict[str, int]) -> list[str]:
    """Where the nemesis proved nothing: a strike whose own code raised, and a fault kind
    with fewer hits during in-flight work than ``min_hits`` asks (a soak whose faults found
    no victim, or only idle ones, is not evidence)."""
    found = [
        f"nemesis: fault {e['index']} ({e['kind']}) raised: {e['error']}"
        for e in events
        if e.get("error")
    ]
    tally = tally_strikes(events)
    for kind, minimum in sorted(min_hits.items()):
        row = tally.get(kind, {"strikes": 0, "hits": 0, "in_flight": 0})
        if row["in_flight"] < minimum:
            found.append(
                f"nemesis: {kind} hit in-flight work {row['in_flight']} times, not >= {minimum} "
                f"({row['strikes']} strikes, {row['hits']} hits)"
            )
    return found
