"""What was in flight when: per export and interval, the time windows of its work.

A strike counts as landing on work only when an export's own prepare, commit or open
transaction was under way at that moment. The windows, in wall-clock seconds:

- ``prepare`` and ``commit``: each try of the task, from Airflow's metadata DB
  (``task_instance`` and ``task_instance_history``: start to end; a try still running at
  the end has no end);
- ``open``: each transaction of the export the coordinators listed as open, from a
  recorder that asks ListTransactions (and the ledger's leases, for the interval) every
  :data:`POLL_S`. A window runs from the first sample that saw it open to the last one:
  never longer than the truth, so a strike inside one landed on an open transaction.

:func:`work_at` is pure (windows and a moment in, the windows holding it out), so the
classification is tested without a cluster (``test_soak.py``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from airflow_provider_kafka2pc.ledger import Ledger
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from tests.support.scheduler import OPEN_STATES

from .aim import OpenTxn
from .exports import SoakExport

#: How often the recorder samples the open transactions.
POLL_S = 0.5
#: The phases that count as work in flight.
PHASES = ("prepare", "commit", "open")


@dataclass(frozen=True)
class Window:
    """One stretch of one export's work on one interval."""

    export: str
    #: the interval's day (``yyyymmdd``); ``?`` when the recorder could not tell
    interval: str
    phase: str
    start: float
    #: None: still going when the soak stopped looking
    end: float | None
    #: the try (``try 2``) or the transactional id
    detail: str = ""

    def holds(self, moment: float) -> bool:
        return self.start <= moment and (self.end is None or moment <= self.end)

    def label(self) -> str:
        return f"{self.export} {self.interval} {self.phase} ({self.detail})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def work_at(
    windows: Iterable[Window],
    moment: float,
    *,
    export: str | None = None,
    interval: str | None = None,
) -> list[Window]:
    """The windows holding ``moment``, those of ``export`` and ``interval`` when given (a
    task kill counts on its own export's interval only)."""
    return [
        w
        for w in windows
        if w.holds(moment)
        and (export is None or w.export == export)
        and (interval is None or w.interval == interval)
    ]


def classify_strikes(events: list[dict[str, Any]], windows: list[Window]) -> None:
    """Mark each strike ``in_flight`` when it hit while work was under way: for a task kill
    or a clear, its own export's work on its own interval (``own``); for the others, any
    export's. ``work`` names the windows (at most 8)."""
    for event in events:
        found: list[Window] = []
        if event.get("hit") and event.get("moment") is not None:
            export, interval = event.get("own") or (None, None)
            found = work_at(windows, event["moment"], export=export, interval=interval)
        event["in_flight"] = bool(found)
        event["work"] = [w.label() for w in found[:8]]


def task_windows(attempts: Iterable[dict[str, Any]], kinds: dict[str, str]) -> list[Window]:
    """The prepare and commit tries as windows; ``kinds``: DAG id -> export kind."""
    found = []
    for a in attempts:
        if a["task"] not in ("prepare", "commit") or a["start"] is None:
            continue
        end = a["end"]
        found.append(
            Window(
                export=kinds.get(a["dag_id"], a["dag_id"]),
                interval=a["day"],
                phase=a["task"],
                start=_epoch(a["start"]),
                end=None if end is None else _epoch(end),
                detail=f"try {a['try_number']}",
            )
        )
    return found


def _epoch(value: datetime | str) -> float:
    return (value if isinstance(value, datetime) else datetime.fromisoformat(value)).timestamp()


def _day(run_key: str | None) -> str:
    return run_key[:10].replace("-", "") if run_key else "?"


class OpenRecorder:
    """Samples the exports' open transactions in a thread of its own until stopped.

    :meth:`open_now` and :meth:`open_since` are the last sample's view (for aiming a
    strike); :meth:`windows` every open transaction seen, first to last sample that saw it
    open.
    """

    def __init__(self, bootstrap: str, ledger_url: str, exports: list[SoakExport]) -> None:
        self._settings = {"bootstrap.servers": bootstrap}
        self._ledger_url = ledger_url
        self._exports = exports
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="open-recorder", daemon=True)
        #: (export kind, transactional id, producer id) -> [first, last, day]
        self._active: dict[tuple[str, str, int], list[Any]] = {}
        self._closed: list[Window] = []
        self._now: list[OpenTxn] = []
        self._sampled_at = 0.0
        self.samples = 0
        self.failed_samples = 0

    def __enter__(self) -> OpenRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def open_now(self, max_age_s: float = 3.0) -> list[tuple[str, str, str]]:
        """(export kind, day, transactional id) open at the last sample, if it is recent."""
        return [(t.export, t.interval, t.transactional_id) for t in self.open_since(max_age_s)]

    def open_since(self, max_age_s: float = 3.0) -> list[OpenTxn]:
        """The transactions open at the last sample, if it is recent, each with the first
        sample that saw it open (to tell a try's own from an earlier try's)."""
        with self._lock:
            fresh = time.time() - self._sampled_at <= max_age_s
            return list(self._now) if fresh else []

    def windows(self) -> list[Window]:
        with self._lock:
            still = [
                Window(kind, day, "open", first, last, tid)
                for (kind, tid, _), (first, last, day) in self._active.items()
            ]
            return [*self._closed, *still]

    def _loop(self) -> None:
        protocol: KafkaProtocol | None = None
        ledger: Ledger | None = None
        days: dict[str, str] = {}
        try:
            while not self._stop.wait(POLL_S):
                try:
                    protocol = protocol or KafkaProtocol(self._settings, timeout_ms=3_000)
                    listed = protocol.list_transactions()
                except Exception:  # a broker fault: no sample, the windows wait
                    self.failed_samples += 1
                    if protocol is not None:
                        with contextlib.suppress(Exception):
                            protocol.close()
                    protocol = None
                    continue
                at = time.time()
                try:
                    ledger = ledger or Ledger(self._ledger_url, migrate=False)
                    days.update(
                        {
                            lease.transactional_id: _day(lease.run_key)
                            for lease in ledger.leases()
                            if lease.leased
                        }
                    )
                except Exception:  # the ledger's server restarting: the last leases known
                    ledger = None
                self._record(at, listed, days)
        finally:
            if protocol is not None:
                with contextlib.suppress(Exception):
                    protocol.close()

    def _record(self, at: float, listed: list[Any], days: dict[str, str]) -> None:
        seen = {}
        for txn in listed:
            if txn.state.value not in OPEN_STATES:
                continue
            kind = next((e.kind for e in self._exports if e.owns(txn.transactional_id)), None)
            if kind is not None:
                seen[(kind, txn.transactional_id, txn.producer_id)] = days.get(
                    txn.transactional_id, "?"
                )
        with self._lock:
            for key in list(self._active):
                if key not in seen:
                    first, last, day = self._active.pop(key)
                    self._closed.append(Window(key[0], day, "open", first, last, key[1]))
            for key, day in seen.items():
                entry = self._active.setdefault(key, [at, at, day])
                entry[1] = at
                if entry[2] == "?":
                    entry[2] = day
            self._now = [OpenTxn(k[0], self._active[k][2], k[1], self._active[k][0]) for k in seen]
            self._sampled_at = at
            self.samples += 1
