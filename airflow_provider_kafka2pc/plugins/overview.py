"""What the Kafka exports page shows, read from the ledger and the broker, never written.

The ledger is opened without migrating it (a viewer's page load creates no schema, and a
SQLite ledger that does not exist yet is reported, not created). The broker is asked by a
dry run of the recovery round (:func:`~..coordination.recovery.recover` with
``dry_run=True``): the same discovery and rules as the ``recover`` sensor, so the page
shows what "recover now" would do before anyone presses it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy.engine import URL

from .. import defaults
from ..connection.settings import scrub
from ..coordination.recovery import RecoveryReport, export_prefixes, recover
from ..hooks.kafka2pc import Kafka2pcHook
from ..hooks.ledger import LedgerHook
from ..ledger import Batch, Lease, Ledger, Participant
from ..ledger.store import earliest_deadline_ms
from ..protocol.client import KafkaProtocol


@dataclass(frozen=True)
class BatchRow:
    """One batch as the page shows it."""

    batch: Batch
    participants: tuple[Participant, ...]
    #: Seconds before the earliest transaction timeout (negative: past it); None when the
    #: batch is final or has no transaction that can time out.
    seconds_left: float | None
    #: What a recovery round would do with it, or why it leaves it (in-doubt batches only).
    plan: str | None = None

    @property
    def in_doubt(self) -> bool:
        return not self.batch.state.final

    @property
    def records(self) -> int:
        return sum(p.committable.record_count for p in self.participants)


@dataclass
class ExportView:
    """One export: its batches, leased ids and what is open on the broker under its prefixes."""

    export_id: str
    #: The DAG the export belongs to, when its id tells (``<dag_id>.<group_id>``).
    dag_id: str | None
    batches: list[BatchRow]
    #: Ids of this export's prefixes held by a batch right now.
    leased: list[Lease]
    #: Ids its prefixes' pools hold in all (free and leased).
    pool_size: int
    #: The dry run's report: open transactions found, what recovery would do.
    dry_run: RecoveryReport | None = None
    broker_error: str | None = None
    #: Whether the user looking may press "recover now" (set by the page).
    can_recover: bool = False

    @property
    def in_doubt(self) -> bool:
        """Anything a person should look at: a batch not final, or a transaction open."""
        return any(row.in_doubt for row in self.batches) or bool(
            self.dry_run and self.dry_run.found
        )

    @property
    def id_prefix(self) -> str | None:
        """The one prefix its batches use, as the export's own ``recover`` task is given it;
        None when they use several (recovery then derives them as the maintenance DAG does).
        """
        prefixes = {row.batch.id_prefix for row in self.batches}
        return prefixes.pop() if len(prefixes) == 1 else None


@dataclass
class Overview:
    """Everything on the page, read at ``read_at``."""

    ledger: str
    kafka_conn_id: str
    read_at: datetime
    exports: list[ExportView] = field(default_factory=list)
    #: Why nothing could be read (no ledger yet, the ledger unreachable).
    error: str | None = None
    broker: str | None = None


class Sources:
    """The two connections the page reads, and the secrets no page text may show."""

    def __init__(
        self,
        kafka_conn_id: str,
        ledger_conn_id: str | None,
        timeout_ms: int = defaults.UI_REQUEST_TIMEOUT_MS,
    ) -> None:
        self.kafka = Kafka2pcHook(kafka_conn_id, timeout_ms=timeout_ms)
        self.ledger_hook = LedgerHook(ledger_conn_id)

    def ledger_url(self) -> URL:
        return self.ledger_hook.url()

    def describe_ledger(self) -> str:
        """The ledger's URL with its password hidden."""
        return self.ledger_hook.describe()

    def scrub(self, text: str) -> str:
        """``text`` without the Kafka connection's secrets nor the ledger's password."""
        # An unusable connection has no secrets to show either.
        with suppress(Exception):
            text = scrub(text, self.kafka.settings())
        try:
            password = self.ledger_url().password
        except Exception:  # no usable ledger URL, no password in it to hide
            password = None
        return text.replace(str(password), "***") if password else text

    @contextmanager
    def open_ledger(self) -> Iterator[Ledger]:
        """The ledger as it is: not migrated, not created."""
        url = self.ledger_url()
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            path = Path(url.database).expanduser()
            if not path.exists():
                raise FileNotFoundError(
                    f"no ledger at {path} yet: no export has run against it (exports "
                    "without ledger_conn_id use SQLite under AIRFLOW_HOME; set "
                    "[kafka2pc] ui_ledger_conn_id for another ledger)"
                )
        with Ledger(url.render_as_string(hide_password=False), migrate=False) as ledger:
            yield ledger


def read_overview(
    sources: Sources,
    *,
    visible: Callable[[str], bool],
    dag_of: Callable[[str], str | None],
    recent: int,
    grace_period: timedelta,
    now: datetime | None = None,
) -> Overview:
    """The page's content: each export ``visible`` allows, from the ledger and the broker."""
    now = now or datetime.now(UTC)
    overview = Overview(
        ledger=sources.describe_ledger(),
        kafka_conn_id=sources.kafka.kafka_config_id,
        read_at=now,
    )
    try:
        with sources.open_ledger() as ledger:
            export_ids = [e for e in ledger.export_ids() if visible(e)]
            overview.exports = [
                read_export(ledger, e, dag_of(e), recent=recent, now=now) for e in export_ids
            ]
            if overview.exports:
                _ask_broker(sources, ledger, overview, grace_period=grace_period, now=now)
    except Exception as exc:  # the page shows any error (scrubbed) rather than fail to render
        overview.error = sources.scrub(f"{type(exc).__name__}: {exc}")
    return overview


def read_export(
    ledger: Ledger, export_id: str, dag_id: str | None, *, recent: int, now: datetime
) -> ExportView:
    """The export's newest ``recent`` batches and every older one still in doubt."""
    batches = ledger.recent(export_id, recent)
    shown = {b.run_key for b in batches}
    batches += [b for b in ledger.in_doubt(export_id) if b.run_key not in shown]
    rows = []
    for batch in batches:
        parts = tuple(ledger.participants(export_id, batch.run_key))
        rows.append(BatchRow(batch, parts, _seconds_left(batch, parts, now)))
    prefixes = list(dict.fromkeys([b.id_prefix for b in batches]))
    pool = [lease for prefix in prefixes for lease in ledger.leases(prefix)]
    leased = [lease for lease in pool if lease.leased and lease.export_id == export_id]
    return ExportView(export_id, dag_id, rows, leased, len(pool))


def _seconds_left(batch: Batch, parts: Sequence[Participant], now: datetime) -> float | None:
    if batch.state.final:
        return None
    deadline = earliest_deadline_ms(parts)
    return None if deadline is None else round(deadline / 1000 - now.timestamp(), 1)


def _ask_broker(
    sources: Sources,
    ledger: Ledger,
    overview: Overview,
    *,
    grace_period: timedelta,
    now: datetime,
) -> None:
    """A dry recovery round per export, on one broker connection; errors land on the page."""
    try:
        overview.broker = sources.kafka.bootstrap_server()
        with sources.kafka.protocol() as protocol:
            for export in overview.exports:
                try:
                    report = dry_run(ledger, protocol, sources.kafka, export, grace_period, now)
                except Exception as exc:  # shown beside this export; the others still read
                    export.broker_error = sources.scrub(f"{type(exc).__name__}: {exc}")
                    continue
                export.dry_run = report
                _annotate(export, report)
    except Exception as exc:  # no broker connection: shown beside every export not yet read
        why = sources.scrub(f"{type(exc).__name__}: {exc}")
        for export in overview.exports:
            if export.dry_run is None and export.broker_error is None:
                export.broker_error = f"the broker through {overview.kafka_conn_id!r}: {why}"


def dry_run(
    ledger: Ledger,
    protocol: KafkaProtocol,
    kafka: Kafka2pcHook,
    export: ExportView,
    grace_period: timedelta,
    now: datetime,
) -> RecoveryReport:
    """What "recover now" would find and do: the round the sensor runs, as a dry run
    (``run_key=None``: no batch is the page's own)."""
    prefixes = export_prefixes(ledger, export.export_id, export.id_prefix)
    with kafka.controller(protocol) as controller:
        return recover(
            ledger,
            protocol,
            controller,
            export.export_id,
            prefixes,
            grace_period=grace_period,
            now=now,
            dry_run=True,
        )


def _annotate(export: ExportView, report: RecoveryReport) -> None:
    """Each in-doubt batch gets what the round would do with it, or why it leaves it."""
    notes: dict[str, str] = {}
    for key, what in report.planned.items():
        notes.setdefault(key, f"recover now: {what}")
    for key, why in report.left.items():
        notes.setdefault(key, f"left alone: {why}" if key in report.live else f"left: {why}")
    for i, row in enumerate(export.batches):
        note = notes.get(str(row.batch.key))
        if row.in_doubt and note:
            export.batches[i] = BatchRow(row.batch, row.participants, row.seconds_left, note)
