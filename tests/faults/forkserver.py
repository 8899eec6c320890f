"""Export runs forked from one process that already holds Airflow.

``python -m tests.faults.forkserver DIR`` (``DIR``: where its own Airflow home goes).

Why: a fault child (:mod:`tests.faults.child`) spent about 11 of its 16.5 CPU-seconds
before its run began: 4 importing Airflow, the provider and the test support, 7 building
the in-process Execution API app and its versioned routers (Cadwyn), which ``dag.test()``
builds on its first request. This server does that once, starts no thread, and forks
each run from there; the run points Airflow at its own home
(:func:`tests.airflow.env.reconfigure`) and is otherwise the child's ``main``. The fault
rig (``conftest.py``) starts one server per test process and speaks to it in lines:

- in, on stdin: ``{"spec": ..., "env": {...}, "log": path, "status": path}``;
- out, on stdout: ``ready`` once prepared, then each forked run's pid (whatever else
  the server prints goes to stderr);
- when the run ends, its status file gets its return code as :mod:`subprocess` gives it
  (``-9`` for a run killed by SIGKILL), written once it is complete.

A fault that kills "the task process" kills the forked run, as it killed the child.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import sys
import traceback
from pathlib import Path
from typing import Any


def prepare(root: Path) -> None:
    """Everything a run would do before its own home matters: imports and the API app."""
    from tests.airflow import env

    env.configure(root / "forkserver-home")
    from cadwyn import Cadwyn

    from tests.airflow import dagtest
    from tests.faults import child, injected  # noqa: F401 (imported for the runs)

    dagtest.share_the_execution_api()
    from airflow.sdk.execution_time import supervisor

    app = supervisor.in_process_api_server().app
    # Cadwyn builds its versioned routers on the first request; build them here, in the
    # server, without a request (a request would start the app's event loop thread).
    if isinstance(app, Cadwyn) and not app._cadwyn_initialized:
        app._cadwyn_initialize()


def run(order: dict[str, Any]) -> int:
    """In the forked process: redirect, take the run's environment and home, run it."""
    log = os.open(order["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(devnull)
    os.environ.clear()
    os.environ.update(order["env"])
    from tests.airflow import env
    from tests.faults import child

    env.reconfigure(Path(order["spec"]["home"]))
    return child.run(order["spec"])


def _fork(order: dict[str, Any], replies: Any) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        replies.close()
        code = run(order)
    except BaseException:  # the run's own failure, reported as the child process did
        traceback.print_exc()
    finally:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return 0  # not reached


def _returncode(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def serve(root: Path) -> None:
    # The replies get stdout's pipe of their own; anything else printed goes to stderr.
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    prepare(root)
    print("ready", file=replies)
    running: dict[int, Path] = {}
    pending = b""
    while True:
        readable, _, _ = select.select([0], [], [], 0.1)
        if readable:
            data = os.read(0, 65536)
            if not data:
                break  # the test process went away
            pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            order = json.loads(line)
            pid = _fork(order, replies)
            running[pid] = Path(order["status"])
            print(pid, file=replies)
        for pid in list(running):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                path = running.pop(pid)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(str(_returncode(status)))
                tmp.replace(path)
    for pid in running:  # runs left when the test process ends go with it
        os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
