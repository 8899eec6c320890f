"""A real PostgreSQL server for the ledger tests: the one named by env, or a throwaway one.

The throwaway server comes from Debian's binaries (``.ci/postgres.sh`` installs them),
runs on a free loopback port with its data in a temp dir, and without fsync: it is
thrown away at the end of the session. PostgreSQL refuses to run as root, so as root it
runs as the ``postgres`` user the Debian package creates.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

#: Use this server (a SQLAlchemy URL; each test gets a schema of its own) instead.
POSTGRES_URL_ENV = "KAFKA2PC_TEST_POSTGRES_URL"
#: Set to 1 to run the ledger tests on SQLite only.
SKIP_POSTGRES_ENV = "KAFKA2PC_SKIP_POSTGRES"
INSTALL_HINT = (
    "the ledger tests need a PostgreSQL server: install Debian's `postgresql` package "
    "(.ci/postgres.sh does it: apt-get install postgresql), or set "
    f"{POSTGRES_URL_ENV}=postgresql://user:password@host:port/db, "
    f"or set {SKIP_POSTGRES_ENV}=1 to test on SQLite only"
)


def find_bindir() -> Path | None:
    """The newest directory holding initdb, pg_ctl and postgres (Debian's layout first)."""

    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", path.parent.name))

    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for bindir in candidates:
        if all((bindir / tool).exists() for tool in ("initdb", "pg_ctl", "postgres")):
            return bindir
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


#: Stops the server and removes its files once the test process is gone, even when that
#: was killed before its fixtures could clean up. Arguments: test pid, root dir, stop command.
_WATCHDOG = """
import os, shutil, subprocess, sys, time
parent, root, stop = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
while True:
    try:
        os.kill(parent, 0)
    except ProcessLookupError:
        break
    time.sleep(1)
subprocess.run(stop, capture_output=True, timeout=60, check=False)
shutil.rmtree(root, ignore_errors=True)
"""


class PostgresServer:
    """One throwaway cluster: ``start()`` returns its URL, ``stop()`` removes every trace."""

    #: ``off`` is fast and fine for a server that is thrown away; a server that is crashed
    #: on purpose and must keep every acknowledged commit needs ``on`` (the default of
    #: PostgreSQL and of production servers).
    synchronous_commit = "off"

    def __init__(self, bindir: Path) -> None:
        self._bindir = bindir
        self._root = Path(tempfile.mkdtemp(prefix="kafka2pc-pg-"))
        self._data = self._root / "data"
        self._as_user: list[str] = []
        self._watchdog: subprocess.Popen[bytes] | None = None
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(self._root)
                raise RuntimeError(
                    f"running as root without a `postgres` user; {INSTALL_HINT}"
                ) from None
            os.chown(self._root, user.pw_uid, user.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]

    def _command(self, tool: str, *args: str) -> list[str]:
        return [*self._as_user, str(self._bindir / tool), *args]

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run(
            self._command(tool, *args), capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            log = self._root / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr}{tail}")

    def start(self) -> str:
        initdb = ["-D", str(self._data), "-U", "postgres", "-A", "trust", "-E", "UTF8"]
        self._run("initdb", *initdb, "--no-locale", "--no-sync")
        port = _free_port()
        options = (
            f"-p {port} -k {self._root} -c listen_addresses=127.0.0.1 "
            f"-c fsync=off -c synchronous_commit={self.synchronous_commit} -c full_page_writes=off"
        )
        log = str(self._root / "server.log")
        self._run("pg_ctl", "-D", str(self._data), "-l", log, "-o", options, "-w", "start")
        self._watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(self._root), *self._stop()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        return f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def _stop(self) -> list[str]:
        return self._command("pg_ctl", "-D", str(self._data), "-m", "immediate", "-w", "stop")

    def stop(self) -> None:
        try:
            if self._watchdog is not None:
                self._watchdog.kill()
                self._watchdog.wait()
            if (self._data / "postmaster.pid").exists():
                subprocess.run(self._stop(), capture_output=True, timeout=60, check=False)
        finally:
            shutil.rmtree(self._root, ignore_errors=True)


class RestartablePostgres(PostgresServer):
    """The throwaway server, restarted as after a crash (``-m immediate``: no shutdown
    checkpoint, crash recovery at start) with the options it was started with.

    That server runs with ``synchronous_commit=off`` (fast, and thrown away): a crash
    then loses the last commits, as PostgreSQL documents. The ledger's sessions here ask
    for ``synchronous_commit=on``, PostgreSQL's default, as a production server has it.
    """

    url = ""

    @property
    def ledger_url(self) -> str:
        durable = {"options": "-csynchronous_commit=on"}
        return make_url(self.url).update_query_dict(durable).render_as_string(False)

    def postmaster_pid(self) -> int | None:
        """The running server's pid (``postmaster.pid``), None when it is not running:
        a crash-restart shows it hit by a new pid."""
        try:
            return int((self._data / "postmaster.pid").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            return None

    def restart(self) -> None:
        log = str(self._root / "server.log")
        self._run("pg_ctl", "-D", str(self._data), "-l", log, "-m", "immediate", "-w", "restart")


@contextmanager
def postgres_url() -> Iterator[str]:
    """The env's server, else a throwaway one (RuntimeError with the install hint if none)."""
    if os.environ.get(POSTGRES_URL_ENV):
        yield os.environ[POSTGRES_URL_ENV]
        return
    bindir = find_bindir()
    if bindir is None:
        raise RuntimeError(INSTALL_HINT)
    server = PostgresServer(bindir)
    try:
        yield server.start()
    finally:
        server.stop()


@contextmanager
def fresh_schema(url: str) -> Iterator[str]:
    """A URL whose connections see only a new, empty schema (dropped afterwards)."""
    schema = f"kafka2pc_test_{uuid.uuid4().hex[:12]}"
    base = make_url(url)
    if base.drivername in ("postgres", "postgresql"):
        base = base.set(drivername="postgresql+psycopg")
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        scoped = make_url(url).update_query_dict({"options": f"-csearch_path={schema}"})
        yield scoped.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()
