"""The Kafka exports page in a real browser against a real ``airflow api-server``.

One API server for the module, a subprocess with an ``AIRFLOW_HOME`` of its own (SQLite
metadata DB, the simple auth manager with an editor and a viewer), the plugin loaded from
the installed package's entry point, and the ledger on PostgreSQL behind a connection with
a password. A DAG file holds the export, so the page can tell the export's DAG and ask the
auth manager about it. The test writes what a crashed run leaves (a COMMIT verdict, its
transactions still open on the broker) next to a committed and an aborted batch, then
drives Debian's Chromium with playwright: the viewer sees everything and may not recover,
the editor presses "recover now", and the broker proves the outcome exactly once.

``KAFKA2PC_UI_SCREENSHOT=docs/images/kafka-exports.png`` also writes the screenshot taken
before recovering there (the one in the README).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, select, update
from sqlalchemy.engine import URL, make_url

from airflow_provider_kafka2pc.coordination.finish import Coordinator
from airflow_provider_kafka2pc.ledger import BatchState, Ledger, ParticipantState, Verdict
from airflow_provider_kafka2pc.ledger.schema import batches
from airflow_provider_kafka2pc.naming import default_prefix
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.transaction.controller import TransactionController
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from devtools.broker import DEFAULT_KAFKA_VERSION
from devtools.broker.node import free_port

from ..conftest import REAL_KAFKA_ENV, assert_exactly_once
from ..support.postgres import postgres_url
from .env import without_airflow

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
#: As root, without a GPU, and without the background connections this closed network refuses.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
DAG_ID = "orders_to_kafka"
EXPORT_ID = f"{DAG_ID}.export"
ROWS = 30  # per batch, split over its two participants
USERS = {"editor": "user", "viewer": "viewer"}  # simple auth manager roles
SCREENSHOT_ENV = "KAFKA2PC_UI_SCREENSHOT"
AUDIT_EVENT = "kafka2pc.recover_now"

DAG_FILE = '''
"""The export the page shows (never run here: the test writes its batches itself)."""
import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_kafka2pc.export import kafka_exactly_once_export

with DAG("orders_to_kafka", schedule="@daily", start_date=datetime(2026, 11, 1)):
    kafka_exactly_once_export(
        "export",
        source={"table": "orders"},
        topic=os.environ["KAFKA2PC_PAGE_TOPIC"],
        key_column="order_id",
        num_partitions=2,
        ledger_conn_id="kafka2pc_ledger",
        asset=None,
    )
'''


@dataclass
class ApiServer:
    """``airflow api-server`` in a process group of its own."""

    home: Path
    env: dict[str, str]
    url: str
    ledger_url: str
    ledger_password: str
    topic: str
    bootstrap: str
    passwords: dict[str, str]
    process: subprocess.Popen | None = field(default=None, repr=False)

    def airflow(self, *args: str, timeout: float = 300) -> None:
        done = subprocess.run(
            [AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, (args, done.stdout[-3000:], done.stderr[-3000:])

    def start(self) -> ApiServer:
        self.airflow("db", "migrate")
        self.airflow("dags", "reserialize")  # the DAG into the metadata DB, no dag-processor
        port = self.url.rsplit(":", 1)[1]
        with (self.home / "api-server.log").open("wb") as log:
            self.process = subprocess.Popen(
                [AIRFLOW, "api-server", "--port", port, "--workers", "1"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + 180
        while not self._healthy():
            assert self.process.poll() is None, f"api-server exited: {self.log()}"
            assert time.monotonic() < deadline, f"api-server not up in 180 s: {self.log()}"
            time.sleep(1)
        return self

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is None:
            return
        for signum, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signum)  # the group this fixture created
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=wait)
                return

    def log(self, chars: int = 4000) -> str:
        path = self.home / "api-server.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"

    def audit_events(self) -> list[tuple[str, str, str]]:
        """The Airflow audit log's "recover now" rows: (owner, dag_id, extra)."""
        with contextlib.closing(sqlite3.connect(self.home / "airflow.db")) as db:
            rows = db.execute(
                "SELECT owner, dag_id, extra FROM log WHERE event = ? ORDER BY id", (AUDIT_EVENT,)
            )
            return list(rows)


def _libpq(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory, broker_pool: Any) -> Iterator[ApiServer]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)")
    bootstrap = (
        os.environ.get(REAL_KAFKA_ENV) or broker_pool.get(DEFAULT_KAFKA_VERSION).bootstrap_servers
    )
    home = tmp_path_factory.mktemp("airflow-page")
    (home / "dags").mkdir()
    (home / "dags" / f"{DAG_ID}.py").write_text(DAG_FILE)
    passwords = {user: secrets.token_urlsafe(12) for user in USERS}
    (home / "passwords.json").write_text(json.dumps(passwords))
    suffix = uuid.uuid4().hex[:8]
    topic = f"page-{suffix}"
    with KafkaProtocol({"bootstrap.servers": bootstrap}) as protocol:
        protocol.create_topic(topic, 2)
    with postgres_url() as server:
        admin = make_url(server).set(drivername="postgresql+psycopg")
        role, database, password = f"ledger_{suffix}", f"ledger_{suffix}", secrets.token_hex(16)
        with psycopg.connect(_libpq(admin), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
            conn.execute(f'CREATE DATABASE "{database}" OWNER {role}')
        ledger = admin.set(username=role, password=password, database=database)
        port = free_port()
        env = without_airflow()
        env.update(
            {
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(port),
                "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
                "AIRFLOW__API__SECRET_KEY": secrets.token_hex(32),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(
                    f"{user}:{role}" for user, role in USERS.items()
                ),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
                "AIRFLOW__KAFKA2PC__UI_LEDGER_CONN_ID": "kafka2pc_ledger",
                "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
                    {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
                ),
                "AIRFLOW_CONN_KAFKA2PC_LEDGER": json.dumps(
                    {
                        "conn_type": "postgres",
                        "host": ledger.host,
                        "port": ledger.port,
                        "login": role,
                        "password": password,
                        "schema": database,
                    }
                ),
                "KAFKA2PC_PAGE_TOPIC": topic,
            }
        )
        deployment = ApiServer(
            home=home,
            env=env,
            url=f"http://127.0.0.1:{port}",
            ledger_url=ledger.render_as_string(hide_password=False),
            ledger_password=password,
            topic=topic,
            bootstrap=bootstrap,
            passwords=passwords,
        )
        started = time.monotonic()
        try:
            deployment.start()
            print(f"api-server up in {time.monotonic() - started:.1f} s")
            yield deployment
        finally:
            deployment.stop()
            with psycopg.connect(_libpq(admin), autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
                conn.execute(f"DROP ROLE IF EXISTS {role}")


# -- what the page is shown -----------------------------------------------------------------


def write_batch(ledger: Ledger, settings: dict[str, Any], topic: str, run_key: str) -> list[Any]:
    """A prepared batch: its ids leased, two transactions written and left open."""
    batch = ledger.begin(
        EXPORT_ID, run_key, topic=topic, id_prefix=default_prefix(EXPORT_ID), num_partitions=2
    )
    committables = []
    for i, tid in enumerate(batch.transactional_ids):
        records = [(f"{run_key}-{i}-{n}".encode(), b"{}") for n in range(ROWS // 2)]
        writer = TransactionalWriter(settings, tid, transaction_timeout_ms=600_000)
        committables.append(writer.write(topic, records))
    ledger.record_prepared(
        EXPORT_ID, run_key, committables, source_rows=ROWS, partitioning="kafka-aligned"
    )
    return committables


def crashed_ago(ledger_url: str, run_key: str, ago: timedelta) -> None:
    """Date the batch's last change ``ago`` back: a run that crashed that long ago."""
    engine = create_engine(make_url(ledger_url).set(drivername="postgresql+psycopg"))
    key = (batches.c.export_id == EXPORT_ID, batches.c.run_key == run_key)
    try:
        with engine.begin() as conn:
            changed = conn.execute(select(batches.c.updated_at).where(*key)).scalar_one()
            conn.execute(update(batches).where(*key).values(updated_at=changed - ago))
    finally:
        engine.dispose()


RUN_COMMITTED = "2026-11-01T00:00:00+00:00/2026-11-02T00:00:00+00:00"
RUN_ABORTED = "2026-11-02T00:00:00+00:00/2026-11-03T00:00:00+00:00"
RUN_IN_DOUBT = "2026-11-03T00:00:00+00:00/2026-11-04T00:00:00+00:00"


def history(server: ApiServer, protocol: KafkaProtocol) -> list[Any]:
    """Three runs: committed, aborted, and one whose commit task died after the COMMIT
    verdict two hours ago, its transactions still open. Returns every committable."""
    settings = {"bootstrap.servers": server.bootstrap}
    with Ledger(server.ledger_url) as ledger:
        coordinator = Coordinator(ledger, TransactionController(protocol))
        committed = write_batch(ledger, settings, server.topic, RUN_COMMITTED)
        ledger.decide(EXPORT_ID, RUN_COMMITTED, Verdict.COMMIT, "all 2 participants prepared")
        coordinator.commit(EXPORT_ID, RUN_COMMITTED)
        aborted = write_batch(ledger, settings, server.topic, RUN_ABORTED)
        ledger.decide(EXPORT_ID, RUN_ABORTED, Verdict.ABORT, "prepare failed: source changed")
        coordinator.abort(EXPORT_ID, RUN_ABORTED, "aborted by the abort task")
        in_doubt = write_batch(ledger, settings, server.topic, RUN_IN_DOUBT)
        ledger.decide(EXPORT_ID, RUN_IN_DOUBT, Verdict.COMMIT, "all 2 participants prepared")
    crashed_ago(server.ledger_url, RUN_IN_DOUBT, timedelta(hours=2))
    return [*committed, *aborted, *in_doubt]


# -- the browser ----------------------------------------------------------------------------


def log_in(browser: Any, server: ApiServer, user: str) -> Any:
    """A context logged in through Airflow's own login form, on the exports page in the UI."""
    context = browser.new_context(viewport={"width": 1500, "height": 1100})
    page = context.new_page()
    page.goto(f"{server.url}/auth/login?next=/plugin/kafka-exports")
    page.get_by_label("Username").fill(user)
    page.get_by_label("Password").fill(server.passwords[user])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/plugin/kafka-exports**", timeout=60_000)
    return page


def exports_frame(page: Any) -> Any:
    """The plugin's page, inside the Airflow UI's iframe."""
    frame = page.frame_locator("iframe")
    frame.locator("section.export").first.wait_for(timeout=60_000)
    return frame


def test_page_shows_batches_and_recovers_the_one_in_doubt(
    api_server: ApiServer, protocol: KafkaProtocol, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    started = time.monotonic()
    committables = history(api_server, protocol)
    in_doubt_ids = [c.transactional_id for c in committables[-2:]]

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            # The viewer sees every batch and what is open, and may not recover.
            page = log_in(browser, api_server, "viewer")
            frame = exports_frame(page)
            export = frame.locator(f'section.export[data-export="{EXPORT_ID}"]')
            assert "in-doubt" in export.get_attribute("class")
            states = {
                row.get_attribute("data-run-key"): row.get_attribute("data-state")
                for row in export.locator("tr.batch").all()
            }
            assert states == {
                RUN_COMMITTED: "COMMITTED",
                RUN_ABORTED: "ABORTED",
                RUN_IN_DOUBT: "COMMIT_DECIDED",
            }
            doubt = export.locator(f'tr.batch[data-run-key="{RUN_IN_DOUBT}"]')
            assert "in-doubt" in doubt.get_attribute("class")
            assert "recover now: finish COMMIT" in doubt.inner_text()
            assert "min" in doubt.locator("td").nth(7).inner_text()  # before the timeout
            records = doubt.locator("td").nth(6).inner_text()
            assert records.endswith(f"of {ROWS} rows, kafka-aligned"), records
            assert "in-doubt" not in export.locator(
                f'tr.batch[data-run-key="{RUN_COMMITTED}"]'
            ).get_attribute("class")
            open_rows = export.locator("table.open tr[data-transactional-id]")
            assert sorted(r.get_attribute("data-transactional-id") for r in open_rows.all()) == (
                sorted(in_doubt_ids)
            )
            assert all("commit" in r.inner_text() for r in open_rows.all())
            assert sorted(export.locator("table.leases code").all_inner_texts()) == sorted(
                [*in_doubt_ids, RUN_IN_DOUBT, RUN_IN_DOUBT]
            )
            assert export.get_by_role("button", name="Recover now").count() == 0
            assert "read-only" in export.inner_text()
            html = frame.locator("html").inner_html()
            assert api_server.ledger_password not in html
            refused = page.request.post(
                f"{api_server.url}/kafka2pc/recover",
                form={"export_id": EXPORT_ID},
                headers={"Origin": api_server.url},
            )
            assert refused.status == 403, refused.text()
            markup = page.request.post(
                f"{api_server.url}/kafka2pc/recover",
                form={"export_id": "<b>x</b>"},
                headers={"Origin": api_server.url},
            )
            assert markup.status == 403 and "&lt;b&gt;x&lt;/b&gt;" in markup.text(), markup.text()
            with Ledger(api_server.ledger_url, migrate=False) as ledger:
                assert ledger.get(EXPORT_ID, RUN_IN_DOUBT).state is BatchState.COMMIT_DECIDED

            # The editor sees the same, with the button; recovering commits the batch.
            page = log_in(browser, api_server, "editor")
            frame = exports_frame(page)
            export = frame.locator(f'section.export[data-export="{EXPORT_ID}"]')
            forged = page.request.post(  # the editor's cookie, another site's form
                f"{api_server.url}/kafka2pc/recover",
                form={"export_id": EXPORT_ID},
                headers={"Origin": "http://elsewhere.example"},
            )
            assert forged.status == 403 and "cross-origin" in forged.text(), forged.text()
            shot = tmp_path / "kafka-exports.png"
            page.screenshot(path=str(shot))
            if os.environ.get(SCREENSHOT_ENV):
                shutil.copy(shot, os.environ[SCREENSHOT_ENV])
            export.get_by_role("button", name="Recover now").click()
            result = frame.locator("#recovery-result")
            result.wait_for(timeout=120_000)
            text = result.inner_text()
            assert "nothing left" in text, text
            assert f"finished {EXPORT_ID}/{RUN_IN_DOUBT}: COMMITTED ({ROWS} records)" in text
            for tid in in_doubt_ids:
                assert f"committed {tid}: COMMITTED" in text, text
            export = frame.locator(f'section.export[data-export="{EXPORT_ID}"]')
            row = export.locator(f'tr.batch[data-run-key="{RUN_IN_DOUBT}"]')
            assert row.get_attribute("data-state") == "COMMITTED"
            assert "in-doubt" not in export.get_attribute("class")
            assert export.locator("table.open tr[data-transactional-id]").count() == 0
            page.screenshot(path=str(tmp_path / "after-recovery.png"))
        finally:
            browser.close()

    # The witnesses: the ledger, the log's markers, a read_committed consumer, the audit log.
    with Ledger(api_server.ledger_url, migrate=False) as ledger:
        batch = ledger.get(EXPORT_ID, RUN_IN_DOUBT)
        parts = ledger.participants(EXPORT_ID, RUN_IN_DOUBT)
        assert ledger.in_doubt(EXPORT_ID) == []
    assert batch.state is BatchState.COMMITTED
    assert [p.state for p in parts] == [ParticipantState.COMMITTED] * 2
    assert_exactly_once(
        protocol,
        api_server.bootstrap,
        api_server.topic,
        *committables,
        committed=2 * ROWS,
        aborted=ROWS,
    )
    (owner, dag_id, extra), *more = api_server.audit_events()
    assert (owner, dag_id, more) == ("editor", DAG_ID, [])
    assert json.loads(extra)["export_id"] == EXPORT_ID
    assert api_server.ledger_password not in api_server.log(chars=10**7)
    print(f"page test: {time.monotonic() - started:.1f} s after the api-server was up")
