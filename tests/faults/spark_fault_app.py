"""spark-submit application for fault tests: the packaged prepare application plus a death.

    spark-submit spark_fault_app.py --fault worker|driver --fault-partition P \\
        --fault-marker FILE -- <the prepare application's own arguments>

It runs :func:`airflow_provider_kafka2pc.spark.app.main` unchanged, except that the
product's own executor hook (``prepare_dataframe(on_batch=...)``, set on the module the
application imports it from) is set: when partition
``P`` has queued its first batch, its Python worker waits for librdkafka to deliver (the
records are then in the log, in an open transaction), writes ``FILE`` and dies by SIGKILL:

- ``worker``: the Python worker kills itself (a Spark task killed mid-write);
- ``driver``: it kills the application's JVM (driver and executor in local mode), so the
  whole prepare job dies with the partitions before ``P`` prepared and left open (run it
  on ``local[1]``: partitions then run one after the other, in order);
- ``pause``: it writes ``FILE`` (with its pid) and waits, up to two minutes, for the test
  to kill it from outside (a Spark standalone worker killed mid-prepare);
- ``hold``: it writes ``FILE`` (``<point>.reached``) and waits, up to two minutes, for
  ``<point>.go``, then writes on: the test breaks something mid-write meanwhile (a topic's
  leader killed), and the rest of the partition's batches meet it.

The fault fires once: when ``FILE`` exists nothing dies. Kept free of the ``tests``
package: its functions are pickled by value to the Python workers.

Under the JVM writer (``--writer jvm`` or ``auto``, which is the JVM one on spark-submit)
no Python worker writes: the tests' fault hook (:data:`JVM_FAULT_HOOK`, from the tests'
own jar, ``jvm/test-src/kafka2pc/faults/Fault.java``, which the prepare's ``spark.jars``
carries: :func:`tests.faults.injected.spark_dies`), named in the writer's hook property (a
task local property), fires after
:data:`JVM_FAULT_ROWS` rows of partition ``P`` are flushed into the log, writes ``FILE``
and then ``driver``: halts the JVM (``Runtime.halt``: no hook, no close, as SIGKILL);
``worker``: ends the task as a dead one (its producer closed without an abort; the task
is a thread of the executor JVM, which has no process of its own to kill).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
import time
from pathlib import Path


def _parent(pid: int) -> int:
    """The parent pid of ``pid``, from /proc (field 4 of stat, after the command name)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _jvm_of_this_worker() -> int:
    """The JVM that started the pyspark daemon that forked this worker."""
    pid = os.getpid()
    for _ in range(4):
        pid = _parent(pid)
        if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
            return pid
    raise RuntimeError("no java ancestor found for this Python worker")


def die_at(kind: str, fault_partition: int, marker: str, partition: int, attempt: int, rows: int):
    """The ``on_batch`` hook: SIGKILL when ``fault_partition`` has queued its first rows."""
    if partition != fault_partition or os.path.exists(marker):
        return
    time.sleep(1.0)  # librdkafka delivers what it holds: the log has it, open
    facts = {"kind": kind, "partition": partition, "attempt": attempt, "rows": rows}
    if kind == "pause":
        Path(marker).write_text(json.dumps({**facts, "pid": os.getpid()}))
        time.sleep(120)  # the test kills this worker's machine meanwhile
        return
    if kind == "hold":
        Path(marker).write_text(json.dumps({**facts, "pid": os.getpid()}))
        go = Path(marker.removesuffix(".reached") + ".go")
        deadline = time.monotonic() + 120
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return
    victim = os.getpid() if kind == "worker" else _jvm_of_this_worker()
    Path(marker).write_text(json.dumps({**facts, "victim": victim}))
    os.kill(victim, signal.SIGKILL)
    time.sleep(30)  # the driver case: this worker goes down with its JVM


#: Rows partition ``P`` sends under the JVM writer before its fault fires (of about 100).
JVM_FAULT_ROWS = 10
_JVM_MODES = {"worker": "die", "driver": "halt"}
#: The tests' ``WriterHook`` (tests/support/jvm_test_jar.py's ``FAULT_HOOK``; named here, not
#: imported: this application stays free of the ``tests`` package).
JVM_FAULT_HOOK = "kafka2pc.faults.Fault"


def _jvm_writer(argv: list[str]) -> bool:
    """The application runs the JVM writer: the spec's (``--spec-file``, as the prepare task
    passes it) or ``--writer`` ``jvm``, or ``auto`` (the default)."""
    import json

    if "--spec-file" in argv:
        with open(argv[argv.index("--spec-file") + 1]) as spec:
            writer = json.load(spec).get("writer", "auto")
    else:
        writer = argv[argv.index("--writer") + 1] if "--writer" in argv else "auto"
    return writer in ("jvm", "auto")


def with_jvm_fault(prepare_dataframe, fault: str):
    """``prepare_dataframe`` with the tests' fault hook named on the session's tasks."""
    from airflow_provider_kafka2pc.spark.jvm_writer import HOOK_PROPERTY

    @functools.wraps(prepare_dataframe)
    def prepare(df, *args, **kwargs):
        df.sparkSession.sparkContext.setLocalProperty(HOOK_PROPERTY, f"{JVM_FAULT_HOOK}:{fault}")
        return prepare_dataframe(df, *args, **kwargs)

    return prepare


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="spark_fault_app")
    parser.add_argument("--fault", choices=("worker", "driver", "pause", "hold"), required=True)
    parser.add_argument("--fault-partition", type=int, required=True)
    parser.add_argument("--fault-marker", required=True)
    ours, rest = parser.parse_known_args(argv)
    if rest and rest[0] == "--":
        rest = rest[1:]

    from airflow_provider_kafka2pc.spark import app, prepare

    if _jvm_writer(rest):
        if ours.fault not in _JVM_MODES:
            raise SystemExit(f"--fault {ours.fault} has no JVM writer equivalent")
        fault = (
            f"{ours.fault_partition},{JVM_FAULT_ROWS},1,{_JVM_MODES[ours.fault]},"
            f"{ours.fault_marker}"
        )
        prepare.prepare_dataframe = with_jvm_fault(prepare.prepare_dataframe, fault)
        return app.main(rest)
    hook = functools.partial(die_at, ours.fault, ours.fault_partition, ours.fault_marker)
    prepare.prepare_dataframe = functools.partial(prepare.prepare_dataframe, on_batch=hook)
    return app.main(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
