"""Faults at chosen points of an export run: small operator subclasses (no patching).

Imported by the child process that runs the DAG (:mod:`tests.faults.child`), never by
the test process. Two kinds of point:

- :func:`die`: write a marker file, then ``SIGKILL`` this process, the Airflow task
  process (``dag.test()`` runs every task in it): a real process death, no ``finally``,
  no callback, no exception handler runs.
- :func:`pause`: write ``<point>.reached`` and wait for ``<point>.go``; the test breaks
  something meanwhile (the broker, the network, the ledger database) and lets it go on.

Each factory returns a subclass of the export's operator for ``operator_classes``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from airflow_provider_kafka2pc.coordination.finish import Coordinator
from airflow_provider_kafka2pc.hooks.export import ExportHook
from airflow_provider_kafka2pc.hooks.kafka2pc import Kafka2pcHook
from airflow_provider_kafka2pc.hooks.ledger import LedgerHook
from airflow_provider_kafka2pc.ledger import ParticipantState
from airflow_provider_kafka2pc.operators.decision import KafkaTransactionDecisionOperator
from airflow_provider_kafka2pc.operators.finish import (
    KafkaTransactionAbortOperator,
    KafkaTransactionCommitOperator,
)
from airflow_provider_kafka2pc.operators.prepare import SparkKafkaPrepareOperator

FAULT_APP = str(Path(__file__).with_name("spark_fault_app.py"))
#: How long a paused task waits for the test to let it go on.
PAUSE_TIMEOUT_S = 240.0


def die(fault_dir: str, point: str, **facts: Any) -> NoReturn:
    """Record where this process dies, then die by SIGKILL."""
    marker = Path(fault_dir) / f"{point}.killed"
    marker.write_text(json.dumps({"pid": os.getpid(), "at": time.time(), **facts}))
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable: SIGKILL cannot be caught")


def pause(fault_dir: str, point: str, **facts: Any) -> None:
    """Say that ``point`` is reached and wait until the test lets this task go on."""
    directory = Path(fault_dir)
    (directory / f"{point}.reached").write_text(json.dumps({"pid": os.getpid(), **facts}))
    go = directory / f"{point}.go"
    deadline = time.monotonic() + PAUSE_TIMEOUT_S
    while not go.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the test never let {point} go on")
        time.sleep(0.1)


def _once(fault_dir: str, point: str) -> bool:
    """True the first time ``point`` is reached in this fault directory."""
    return not any((Path(fault_dir) / f"{point}.{s}").exists() for s in ("killed", "reached"))


# -- the Spark job ------------------------------------------------------------------------


def spark_dies(fault_dir: str, kind: str, partition: int) -> type:
    """The prepare submits :mod:`tests.faults.spark_fault_app` instead of the packaged
    application; it dies at ``partition`` (``worker``: the task; ``driver``: the job).
    Unless the job runs the Python writer, the tests' jar (the JVM writer's fault hook)
    goes in ``spark.jars``, after the product's: loaded by the same class loader, or a
    child of it."""
    marker = str(Path(fault_dir) / f"spark-{kind}.killed")

    fault = ["--fault", kind, "--fault-partition", str(partition), "--fault-marker", marker]

    class SparkDiesPrepare(SparkKafkaPrepareOperator):
        """The prepare's hook submits the fault app, the application's arguments after it."""

        def spark_hook(self, job: Any, kafka: Any = None) -> Any:
            hook = super().spark_hook(job, kafka)
            hook.application = FAULT_APP
            build = hook.submit_hook
            jar = with_test_jar if job.writer != "python" else dict  # the JVM writer's fault
            hook.submit_hook = lambda args, conf: build([*fault, "--", *args], jar(conf))
            return hook

    return SparkDiesPrepare


def with_test_jar(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` with the tests' jar last in ``spark.jars``."""
    from tests.support.jvm_test_jar import jvm_test_jar  # imports pyspark: only here

    jars = [j for j in conf.get("spark.jars", "").split(",") if j]
    return {**conf, "spark.jars": ",".join([*jars, str(jvm_test_jar())])}


def spark_holds(fault_dir: str, partition: int) -> type:
    """Like :func:`spark_dies`, but the Python writer's ``partition`` holds after its first
    batch (``spark-hold.reached``) until the test says ``spark-hold.go``, then writes on."""
    marker = str(Path(fault_dir) / "spark-hold.reached")
    fault = ["--fault", "hold", "--fault-partition", str(partition), "--fault-marker", marker]

    class SparkHoldsPrepare(SparkKafkaPrepareOperator):
        def spark_hook(self, job: Any, kafka: Any = None) -> Any:
            hook = super().spark_hook(job, kafka)
            hook.application = FAULT_APP
            build = hook.submit_hook
            hook.submit_hook = lambda args, conf: build([*fault, "--", *args], conf)
            return hook

    return SparkHoldsPrepare


# -- the Airflow task process killed ------------------------------------------------------


def decide_dies_before_verdict(fault_dir: str) -> type:
    """Judges, then dies before the ledger records the verdict."""

    class DecideDiesBeforeVerdict(KafkaTransactionDecisionOperator):
        def assess(self, hook, ledger, batch):
            assessment = super().assess(hook, ledger, batch)
            die(fault_dir, "decide-before-verdict", judged=assessment.verdict.value)

    return DecideDiesBeforeVerdict


def decide_dies_after_verdict(fault_dir: str) -> type:
    """The ledger has the verdict; dies before the task state store, XCom and the branch."""

    class DecideDiesAfterVerdict(KafkaTransactionDecisionOperator):
        def publish_verdict(self, context, batch):
            die(fault_dir, "decide-after-verdict", verdict=batch.verdict.value)

    return DecideDiesAfterVerdict


def commit_dies_after(fault_dir: str, k: int) -> type:
    """Commits ``k`` participants (outcomes recorded), then dies."""

    class CommitDiesAfterK(KafkaTransactionCommitOperator):
        def commit(self, context, coordinator: Coordinator):
            todo = coordinator.unfinished(self.export_id, self.run_key)
            done = coordinator.commit_participants(self.export_id, self.run_key, todo[:k])
            die(fault_dir, "commit-after-k", committed=[r.transactional_id for r in done])

    return CommitDiesAfterK


def abort_dies_after(fault_dir: str, k: int) -> type:
    """Aborts ``k`` participants (outcomes recorded), then dies: the abort task's own
    single ``abort_all`` cut in two."""

    class AbortDiesAfterK(KafkaTransactionAbortOperator):
        def execute(self, context):
            hook = ExportHook(self.kafka_conn_id, self.ledger_conn_id)
            with hook.coordinator() as coordinator:
                todo = coordinator.unfinished(self.export_id, self.run_key)[:k]
                done = coordinator.controller.abort_all([p.committable for p in todo])
                for r in done:
                    coordinator.ledger.record_outcome(
                        self.export_id,
                        self.run_key,
                        r.transactional_id,
                        ParticipantState.ABORTED,
                        r.reason,
                    )
            die(fault_dir, "abort-after-k", aborted=[r.transactional_id for r in done])

    return AbortDiesAfterK


# -- pauses: the test breaks something meanwhile -----------------------------------------


def decide_pauses(fault_dir: str) -> type:
    """Waits before judging: between the prepare and the decision."""

    class DecidePauses(KafkaTransactionDecisionOperator):
        def assess(self, hook, ledger, batch):
            if _once(fault_dir, "decide"):
                pause(fault_dir, "decide", ids=list(batch.transactional_ids))
            return super().assess(hook, ledger, batch)

    return DecidePauses


def commit_pauses(fault_dir: str, broker_first: bool = False) -> type:
    """Waits with its connections open, before committing anything; with
    ``broker_first`` it commits on the broker first and waits before the ledger hears."""

    class CommitPauses(KafkaTransactionCommitOperator):
        def commit(self, context, coordinator: Coordinator):
            if _once(fault_dir, "commit"):
                todo = coordinator.unfinished(self.export_id, self.run_key)
                facts: dict[str, Any] = {"try": context["ti"].try_number}
                if broker_first:
                    done = coordinator.controller.commit_all([p.committable for p in todo])
                    facts["broker"] = {r.transactional_id: r.outcome.value for r in done}
                pause(fault_dir, "commit", **facts)
            return super().commit(context, coordinator)

    return CommitPauses


def abort_pauses(fault_dir: str) -> type:
    """Waits before aborting: what a failed run left open can be looked at."""

    class AbortPauses(KafkaTransactionAbortOperator):
        def execute(self, context):
            if _once(fault_dir, "abort"):
                pause(fault_dir, "abort")
            return super().execute(context)

    return AbortPauses


def commit_after_timeout(fault_dir: str, lost: int) -> type:
    """Commits every participant but ``lost``, waits until the broker's transaction
    timeout has aborted that one, then commits as usual (the Flink data-loss scenario,
    for one participant)."""

    class CommitAfterTimeout(KafkaTransactionCommitOperator):
        def commit(self, context, coordinator: Coordinator):
            if _once(fault_dir, "timed-out"):
                todo = coordinator.unfinished(self.export_id, self.run_key)
                victim = todo[lost].committable
                others = [p for p in todo if p.index != lost]
                coordinator.commit_participants(self.export_id, self.run_key, others)
                with Kafka2pcHook(self.kafka_conn_id).protocol() as protocol:
                    waited = _wait_for_timeout_abort(protocol, victim)
                marker = Path(fault_dir) / "timed-out.reached"
                marker.write_text(json.dumps({"lost": victim.transactional_id, **waited}))
            return super().commit(context, coordinator)

    return CommitAfterTimeout


def _wait_for_timeout_abort(protocol: Any, committable: Any) -> dict[str, Any]:
    """Until the coordinator has ended ``committable``'s transaction by its timeout."""
    deadline = time.monotonic() + committable.transaction_timeout_ms / 1000 + 60
    while time.monotonic() < deadline:
        [state] = protocol.describe_transactions([committable.transactional_id])
        if state.producer_epoch != committable.producer_epoch or state.state != "Ongoing":
            return {"state": state.state.value, "epoch": state.producer_epoch}
        time.sleep(0.5)
    raise TimeoutError(f"{committable.transactional_id} did not time out")


# -- two runs at once ---------------------------------------------------------------------


def _wait_for(path: Path, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def prepare_races(fault_dir: str, role: str) -> type:
    """Two prepares of one run key, interleaved the same way every time.

    Both meet before touching the ledger, so they begin together. Then ``first``'s
    Spark job writes, ``second``'s writes after it (re-initialising the same ids fences
    the first's transactions), ``first`` records its committables and its run decides;
    only then does ``second`` record. Every wait has a timeout, so a product that makes
    one of them stop early (writes nothing) is not blocked by the other; each wait's
    outcome goes into ``<role>.race`` (JSON), so the test can tell whether the race it
    names really happened (both past their write, in that order, no wait timed out).
    """
    directory = Path(fault_dir)

    def note(key: str, value: Any) -> None:
        path = directory / f"{role}.race"
        seen = json.loads(path.read_text()) if path.exists() else {}
        path.write_text(json.dumps({**seen, key: value}))

    class PrepareRaces(SparkKafkaPrepareOperator):
        def execute(self, context):
            (directory / f"{role}.arrived").write_text(str(os.getpid()))
            other = "second" if role == "first" else "first"
            note("met", _wait_for(directory / f"{other}.arrived", PAUSE_TIMEOUT_S))
            return super().execute(context)

        def run_spark(self, context, kafka, batch, source_args):
            if role == "second":
                note("after_first_wrote", _wait_for(directory / "first.written", PAUSE_TIMEOUT_S))
            prepared = super().run_spark(context, kafka, batch, source_args)
            ids = [c.transactional_id for c in prepared.committables]
            (directory / f"{role}.written").write_text(json.dumps(ids))
            note("written_at", time.time())
            if role == "first":
                note("second_wrote", _wait_for(directory / "second.written", 120))
            else:
                with LedgerHook(self.ledger_conn_id).get_conn() as ledger:
                    deadline = time.monotonic() + 60
                    verdict = None
                    while time.monotonic() < deadline:
                        now = ledger.get(self.export_id, self.run_key)
                        if now is not None and now.verdict is not None:
                            verdict = now.verdict.value
                            break
                        time.sleep(0.2)
                note("first_decided", verdict)
            return prepared

    return PrepareRaces


FACTORIES: dict[str, Callable[..., type]] = {
    f.__name__: f
    for f in (
        spark_dies,
        spark_holds,
        decide_dies_before_verdict,
        decide_dies_after_verdict,
        commit_dies_after,
        abort_dies_after,
        decide_pauses,
        commit_pauses,
        abort_pauses,
        commit_after_timeout,
        prepare_races,
    )
}


def operator_classes(fault_dir: str, faults: dict[str, list[Any]]) -> dict[str, type]:
    """``{"commit": ["commit_dies_after", {"k": 1}], ...}`` -> ``{"commit": class, ...}``."""
    return {
        task: FACTORIES[name](fault_dir, **(params or {}))
        for task, (name, params) in faults.items()
    }
