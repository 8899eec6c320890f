"""The Kafka exports page: a FastAPI app the Airflow API server mounts at ``/kafka2pc``.

Server-rendered HTML (Jinja, autoescaped), shown inside the Airflow UI through the
plugin's external view. Who may see and do what is asked of Airflow's auth manager, as the
API server's own routes do: an export is listed to users who may read its DAG, and "recover
now" is offered to (and accepted from) users who may edit it. The export's DAG is told from
its id (``<dag_id>.<group_id>``, the default); an export whose id names no DAG needs the
permission on all DAGs.

Imported only by the API server (the plugin builds this app on first use), so the workers
that load every plugin never import FastAPI or the API server's security for it.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep
from airflow.models.dag import DagModel
from airflow.models.log import Log
from airflow.utils.session import create_session
from fastapi import FastAPI, Form, HTTPException, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from sqlalchemy import select

from ..coordination.recovery import RecoveryReport
from ..hooks.export import ExportHook
from ..utils import config
from .overview import ExportView, Overview, Sources, read_export, read_overview

log = logging.getLogger(__name__)

#: The Airflow audit log's event for a "recover now".
AUDIT_EVENT = "kafka2pc.recover_now"

_templates = Environment(
    loader=FileSystemLoader(Path(__file__).with_name("templates")),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


def _when(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _span(seconds: float | None) -> str:
    if seconds is None:
        return ""
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    if seconds < 120:
        return f"{sign}{seconds:.0f} s"
    if seconds < 3600:
        minutes, rest = divmod(round(seconds), 60)
        return f"{sign}{minutes} min" + (f" {rest} s" if rest else "")
    hours, minutes = divmod(round(seconds) // 60, 60)
    return f"{sign}{hours} h" + (f" {minutes} min" if minutes else "")


_templates.filters["when"] = _when
_templates.filters["span"] = _span


class Access:
    """What one user may see and do, asked of the auth manager per DAG."""

    def __init__(self, user: BaseUser) -> None:
        self.user = user
        self.auth = get_auth_manager()
        with create_session() as session:
            self._dags = set(session.scalars(select(DagModel.dag_id)))

    def dag_of(self, export_id: str) -> str | None:
        """The longest DAG id that ``export_id`` starts with, followed by a dot."""
        parts = export_id.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            candidate = ".".join(parts[:cut])
            if candidate in self._dags:
                return candidate
        return None

    def may(self, method: str, export_id: str) -> bool:
        dag_id = self.dag_of(export_id)
        details = None
        if dag_id is not None:
            details = DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id))
        return self.auth.is_authorized_dag(method=method, details=details, user=self.user)

    def may_read(self, export_id: str) -> bool:
        return self.may("GET", export_id)

    def may_recover(self, export_id: str) -> bool:
        return self.may("PUT", export_id)


def _sources() -> Sources:
    return Sources(config.ui_kafka_conn_id(), config.ui_ledger_conn_id())


def _overview(access: Access) -> Overview:
    overview = read_overview(
        _sources(),
        visible=access.may_read,
        dag_of=access.dag_of,
        recent=config.ui_recent_batches(),
        grace_period=config.grace_period(),
    )
    for export in overview.exports:
        export.can_recover = access.may_recover(export.export_id)
    return overview


def _render(
    request: Request,
    overview: Overview,
    user: BaseUser,
    *,
    recovered: tuple[str, RecoveryReport | None, str | None] | None = None,
) -> HTMLResponse:
    html = _templates.get_template("kafka_exports.html").render(
        o=overview,
        user=user.get_name(),
        grace_period=config.grace_period(),
        recover_url=request.url_for("recover_now").path,
        page_url=request.url_for("exports_page").path,
        recovered=recovered,
    )
    return HTMLResponse(html)


def _same_origin(request: Request) -> bool:
    """A form post from this server's own page (the cookie is SameSite=Lax; this also
    refuses a same-site page on another port)."""
    origin = request.headers.get("origin")
    if origin is None:
        return request.headers.get("sec-fetch-site") in (None, "same-origin")
    return urlsplit(origin).netloc == request.headers.get("host")


def _audit(
    user: BaseUser, export: ExportView, report: RecoveryReport | None, error: str | None
) -> None:
    """Who pressed "recover now", in Airflow's audit log (Browse > Audit Log)."""
    extra = {"export_id": export.export_id, "id_prefix": export.id_prefix}
    extra.update({"error": error} if error else {"result": report.summary() if report else ""})
    with create_session() as session:
        session.add(
            Log(
                event=AUDIT_EVENT,
                owner=user.get_name(),
                dag_id=export.dag_id,
                extra=json.dumps(extra),
            )
        )


def create_app() -> FastAPI:
    app = FastAPI(
        title="Kafka exports",
        description="Exactly-once Kafka exports: batches, open transactions, recovery.",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    @app.exception_handler(HTTPException)
    async def _to_login(request: Request, exc: HTTPException) -> Any:
        if exc.status_code == status.HTTP_401_UNAUTHORIZED:
            login = get_auth_manager().get_url_login(next_url=str(request.url))
            return RedirectResponse(login, status_code=status.HTTP_303_SEE_OTHER)
        # The detail may quote the form (an export id): escaped, never markup.
        return HTMLResponse(f"<p>{exc.status_code}: {escape(str(exc.detail))}</p>", exc.status_code)

    @app.get("/", response_class=HTMLResponse, name="exports_page")
    def exports_page(request: Request, user: GetUserDep) -> HTMLResponse:
        """Every export the user may read, with its batches and what is open on the broker."""
        return _render(request, _overview(Access(user)), user)

    @app.post("/recover", response_class=HTMLResponse, name="recover_now")
    def recover_now(
        request: Request, user: GetUserDep, export_id: str = Form(max_length=200)
    ) -> HTMLResponse:
        """One recovery round of the export, the ``recover`` sensor's (ExportHook.recover)."""
        if not _same_origin(request):
            raise HTTPException(status.HTTP_403_FORBIDDEN, "cross-origin request refused")
        access = Access(user)
        if not access.may_recover(export_id):
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"recovering {export_id!r} needs permission to edit its DAG",
            )
        sources = _sources()
        report: RecoveryReport | None = None
        error: str | None = None
        started = datetime.now(UTC)
        with sources.open_ledger() as ledger:
            if export_id not in ledger.export_ids():
                raise HTTPException(status.HTTP_404_NOT_FOUND, f"no export {export_id!r}")
            export = read_export(  # as the page read it: the same id prefix
                ledger,
                export_id,
                access.dag_of(export_id),
                recent=config.ui_recent_batches(),
                now=started,
            )
        hook = ExportHook(sources.kafka.kafka_config_id, sources.ledger_hook.ledger_conn_id)
        try:
            report = hook.recover(
                export_id,
                run_key=None,
                id_prefix=export.id_prefix,
                grace_period=config.grace_period(),
            )
        except Exception as exc:  # shown on the page (and audited), as the sensor would log it:
            # whoever pressed "recover now" sees why it failed, not a 500
            error = sources.scrub(f"{type(exc).__name__}: {exc}")
        log.info(
            "%s pressed recover now on %s: %s (%.1f s)",
            user.get_name(),
            export_id,
            error or report.summary(),
            (datetime.now(UTC) - started) / timedelta(seconds=1),
        )
        _audit(user, export, report, error)
        return _render(request, _overview(access), user, recovered=(export_id, report, error))

    return app
