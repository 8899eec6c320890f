"""ACLs per export on a real broker with the standard authorizer (KRaft StandardAuthorizer).

Exports A and B have their own SCRAM principals and exactly the ACLs ``kafka2pc acls``
prints. A's credentials cannot commit, abort, fence, describe, list or re-initialise B's
transactions, through the ``kafka2pc`` commands that bypass the ledger; each refusal
names the missing ACL, and B's transactions are untouched afterwards (same producer id
and epoch, still open) and commit exactly once. The ACL list is also shown to be exactly
enough: with it a principal runs every step; without any one of its non-implied entries
some step is refused (DESCRIBE is implied by READ and WRITE, measured here).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

from airflow_provider_kafka2pc.cli import main as cli_main
from airflow_provider_kafka2pc.connection.acls import (
    AclEntry,
    authorization_failure,
    export_acls,
    kafka_python_acl,
)
from airflow_provider_kafka2pc.connection.settings import to_kafka_python
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.protocol.described import CoordinatorTxnState
from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.controller import TransactionController
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from tests.conftest import assert_exactly_once, audit, cli, unique_id, write_jsonl

ROWS = 40


def rows(start: int, count: int) -> list[tuple[bytes, bytes]]:
    return [(f"k{i}".encode(), json.dumps({"id": i}).encode()) for i in range(start, start + count)]


@pytest.fixture
def kafka2pc(capsys: pytest.CaptureFixture[str]) -> Callable[..., subprocess.CompletedProcess]:
    """``kafka2pc`` in this process (its ``main``, as the console script calls it): the
    same code as a separate process without paying an interpreter start per command."""

    def run(*args: str) -> subprocess.CompletedProcess:
        capsys.readouterr()
        code = cli_main(list(args))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["kafka2pc", *args], code, out, err)

    return run


def private_json(path: Path, data: Any) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle)
    return path


@pytest.fixture(scope="module")
def admin_client(secure_broker) -> Iterator[KafkaAdminClient]:
    settings = to_kafka_python(secure_broker.admin)
    client = KafkaAdminClient(
        **{k: v for k, v in settings.items() if k in KafkaAdminClient.DEFAULT_CONFIG}
    )
    yield client
    client.close()


def acls_of(admin: KafkaAdminClient, principal: str) -> set[tuple[str, ...]]:
    """The principal's ACLs on the broker, as :meth:`AclEntry.key` tuples."""
    found, error = admin.describe_acls(
        ACLFilter(
            principal,
            "*",
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
        )
    )
    assert error.errno == 0, error
    return {
        (
            a.principal,
            a.host,
            a.resource_pattern.resource_type.name,
            a.resource_pattern.pattern_type.name,
            a.resource_pattern.resource_name,
            a.operation.name,
            a.permission_type.name,
        )
        for a in found
    }


def wait_for_acls(admin: KafkaAdminClient, principal: str, wanted: set[tuple[str, ...]]) -> None:
    """ACL changes reach the authorizer through the metadata log: wait until they serve."""
    deadline = time.monotonic() + 10
    while acls_of(admin, principal) != wanted:
        assert time.monotonic() < deadline, (acls_of(admin, principal), wanted)
        time.sleep(0.1)
    time.sleep(0.2)


# -- export A against export B ---------------------------------------------------------------


@pytest.mark.parametrize("layout", ["own-topics", "shared-topic"])
def test_export_a_cannot_commit_abort_fence_describe_or_list_export_b_transactions(
    secure_broker, layout, tmp_path, kafka2pc
):
    if layout == "shared-topic":  # two exports into one topic: only the id ACLs part them
        topic_a = topic_b = secure_broker.create_topic(2)
    else:
        topic_a, topic_b = secure_broker.create_topic(2), secure_broker.create_topic(2)
    prefix_a, prefix_b = unique_id("ea"), unique_id("eb")
    secure_broker.grant_export("User:export-a", prefix_a, topic_a)
    secure_broker.grant_export("User:export-b", prefix_b, topic_b)
    a, b = secure_broker.sasl_ssl("export-a"), secure_broker.sasl_ssl("export-b")

    ids_b = [f"{prefix_b}-0", f"{prefix_b}-1"]
    prepared = [
        TransactionalWriter(b, tid).write(topic_b, rows(i * ROWS, ROWS))
        for i, tid in enumerate(ids_b)
    ]
    document = tmp_path / "b-committables.json"
    document.write_text(json.dumps([c.to_dict() for c in prepared]))
    a_file = private_json(tmp_path / "a.json", a)
    with KafkaProtocol(b, timeout_ms=10_000) as as_b:
        before = {d.transactional_id: d for d in as_b.describe_transactions(ids_b)}
    assert {d.state for d in before.values()} == {CoordinatorTxnState.ONGOING}

    # Commit and abort read B's partitions' log first: refused on the topic when A may
    # not read it, on the transactional id when the topic is shared.
    finish_refusal = "TOPIC_AUTHORIZATION_FAILED" if layout == "own-topics" else "TRANSACTIONAL_ID_"
    refused = {
        "commit": (["commit", str(document)], finish_refusal),
        "abort": (["abort", str(document)], finish_refusal),
        "fence": (["fence", "--transactional-id", ids_b[0]], "TRANSACTIONAL_ID_"),
        "describe": (["txn", "describe", "--transactional-id", ids_b[0]], "TRANSACTIONAL_ID_"),
    }
    for action, (command, error) in refused.items():
        done = kafka2pc(*command, "--config-file", str(a_file))
        assert done.returncode == 1, (action, done.stdout, done.stderr)
        answer = json.loads(done.stdout)
        assert answer["error"] == "AuthorizationError", (action, answer)
        message = answer["message"]
        assert message.startswith(f"User:export-a may not {action}: "), message
        assert f"the broker answered {error}" in message, message
        names = topic_b if error.startswith("TOPIC") else ids_b[0]
        assert f"'{names}'" in message, message  # the resource the ACL is missing on
        assert secure_broker.passwords["export-a"] not in done.stdout + done.stderr

    # Writing under B's id would fence B's open transaction: refused before it opens.
    source = write_jsonl(tmp_path / "rows.jsonl", 5)
    prepare = kafka2pc(
        "prepare",
        *("-t", topic_b, "--transactional-id", ids_b[1], "--input", str(source)),
        *("--config-file", str(a_file)),
    )
    assert prepare.returncode != 0, prepare.stdout
    assert "authorization failed" in json.loads(prepare.stdout)["message"].lower()

    # Listing is not refused but filtered: A sees its own ids only, none of B's.
    with KafkaProtocol(a, timeout_ms=10_000) as as_a:
        own = TransactionalWriter(a, f"{prefix_a}-0").write(topic_a, rows(10_000, ROWS))
        listed = kafka2pc("txn", "list", "--config-file", str(a_file))
        assert listed.returncode == 0, listed.stderr
        seen = {t["transactional_id"] for t in json.loads(listed.stdout)["transactions"]}
        assert f"{prefix_a}-0" in seen and not seen & set(ids_b), seen
        assert TransactionController(as_a).commit(own).outcome.committed

    # B's transactions are untouched: same producer ids and epochs, still open; B commits.
    with KafkaProtocol(b, timeout_ms=10_000) as as_b:
        after = {d.transactional_id: d for d in as_b.describe_transactions(ids_b)}
        for tid in ids_b:
            assert after[tid].state is CoordinatorTxnState.ONGOING, after[tid]
            assert (after[tid].producer_id, after[tid].producer_epoch) == (
                before[tid].producer_id,
                before[tid].producer_epoch,
            )
        b_file = private_json(tmp_path / "b.json", b)
        committed = cli("commit", str(document), "--config-file", str(b_file))
        assert committed.returncode == 0, committed.stdout + committed.stderr
        outcomes = {r["outcome"] for r in json.loads(committed.stdout)["results"]}
        assert outcomes == {"COMMITTED"}
        expected = 2 * ROWS + (ROWS if layout == "shared-topic" else 0)
        assert_exactly_once(as_b, b, topic_b, *prepared, committed=expected, aborted=0)
        assert audit(as_b, topic_b).totals["committed"] == expected


# -- the list is exactly enough --------------------------------------------------------------


def run_every_step(
    settings: dict[str, Any], topic: str, prefix: str, start: int = 0
) -> tuple[list[str], Committable | None]:
    """Prepare, describe, list, commit, audit and fence as one export does; the steps
    that succeeded, then the refusal that stopped it (if any); and what was prepared
    (3 records, keys from ``start``)."""
    steps: list[str] = []
    tid = f"{prefix}-{time.time_ns() % 10**9}"
    c = None
    try:
        c = TransactionalWriter(settings, tid, timeout_s=10).write(topic, rows(start, 3))
        steps.append("prepare")
        with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
            assert protocol.describe_transaction(tid) is not None
            steps.append("describe")
            assert tid in {t.transactional_id for t in protocol.list_transactions(prefix)}
            steps.append("list")
            assert TransactionController(protocol).commit(c).outcome.committed
            steps.append("commit")
            audit(protocol, topic, c)
            steps.append("audit")
            TransactionController(protocol).fence(tid)
            steps.append("fence")
    except Exception as exc:
        steps.append(f"refused: {authorization_failure(exc) or type(exc).__name__}: {exc}")
    return steps, c


ALL_STEPS = ["prepare", "describe", "list", "commit", "audit", "fence"]


def test_the_acls_kafka2pc_prints_are_exactly_what_an_export_needs(
    secure_broker, admin_client, tmp_path, caplog
):
    topic, prefix, principal = secure_broker.create_topic(1), unique_id("pr"), "User:probe"
    admin_file = private_json(tmp_path / "admin.json", secure_broker.admin)
    printed = cli(
        "acls",
        *("--principal", principal, "--id-prefix", prefix, "--topic", topic, "--apply"),
        *("--config-file", str(admin_file)),
    )
    assert printed.returncode == 0, printed.stdout + printed.stderr
    answer = json.loads(printed.stdout)
    assert answer["applied"] is True
    entries = [AclEntry(**a) for a in answer["acls"]]
    assert entries == export_acls(principal, prefix, [topic])
    wanted = {e.key() for e in entries}
    wait_for_acls(admin_client, principal, wanted)  # on the broker: these, and no more
    assert {(e.resource_type, e.pattern_type, e.resource_name, e.operation) for e in entries} == {
        ("TOPIC", "LITERAL", topic, "WRITE"),
        ("TOPIC", "LITERAL", topic, "READ"),
        ("TOPIC", "LITERAL", topic, "DESCRIBE"),
        ("TRANSACTIONAL_ID", "PREFIXED", f"{prefix}-", "WRITE"),
        ("TRANSACTIONAL_ID", "PREFIXED", f"{prefix}-", "DESCRIBE"),
    }
    probe = secure_broker.sasl_ssl("probe")
    steps, prepared = run_every_step(probe, topic, prefix)
    assert steps == ALL_STEPS
    committed, aborted = [prepared], []

    # Without each entry in turn: which step the broker refuses.
    first_refused = {  # -> the step refused, and what the refusal says
        # AddPartitionsToTxn: the writer (librdkafka) says only "Local: Purged in queue";
        # its log names TOPIC_AUTHORIZATION_FAILED (transaction/writer.py does not map it).
        ("TOPIC", "WRITE"): ("prepare", "Local: Purged in queue"),
        # The commit reads the log's markers (Fetch) before and after EndTxn.
        ("TOPIC", "READ"): ("commit", "TOPIC_AUTHORIZATION_FAILED"),
        # InitProducerId.
        ("TRANSACTIONAL_ID", "WRITE"): ("prepare", "Transactional Id authorization failed"),
    }
    for run, entry in enumerate(entries, start=1):
        pattern = ResourcePattern(
            ResourceType[entry.resource_type],
            entry.resource_name,
            ACLResourcePatternType[entry.pattern_type],
        )
        one = ACLFilter(
            principal,
            "*",
            ACLOperation[entry.operation],
            ACLPermissionType.ALLOW,
            ResourcePatternFilter(
                pattern.resource_type, pattern.resource_name, pattern.pattern_type
            ),
        )
        admin_client.delete_acls([one])
        wait_for_acls(admin_client, principal, wanted - {entry.key()})
        caplog.clear()
        steps, prepared = run_every_step(probe, topic, prefix, start=3 * run)
        admin_client.create_acls([kafka_python_acl(entry)])
        wait_for_acls(admin_client, principal, wanted)
        if prepared is not None and steps[-1].startswith("refused"):
            # Refused before EndTxn, the transaction is still open: with the ACL back,
            # the same principal ends it.
            with KafkaProtocol(probe, timeout_ms=10_000) as protocol:
                assert TransactionController(protocol).abort(prepared).outcome.aborted
            aborted.append(prepared)
        elif prepared is not None:
            committed.append(prepared)
        refusal = first_refused.get((entry.resource_type, entry.operation))
        if refusal is None:  # DESCRIBE: implied by READ and WRITE
            assert entry.implied_by == "WRITE", entry
            assert steps == ALL_STEPS, (entry.operation, entry.resource_type, steps)
        else:
            where, says = refusal
            done = ALL_STEPS[: ALL_STEPS.index(where)]
            assert steps[:-1] == done, (entry.operation, entry.resource_type, steps)
            assert steps[-1].startswith("refused: ") and says in steps[-1], steps[-1]
            if (entry.resource_type, entry.operation) == ("TOPIC", "WRITE"):
                assert "Topic authorization failed" in caplog.text
    with KafkaProtocol(secure_broker.admin, timeout_ms=10_000) as admin:
        assert not [
            t for t in admin.list_transactions(prefix) if t.state is CoordinatorTxnState.ONGOING
        ]
        # Both witnesses, over SASL: each committed run's 3 records once, the aborted
        # ones invisible, nothing open (a refused prepare wrote nothing that stayed open).
        report, _ = assert_exactly_once(
            admin, secure_broker.admin, topic, *committed, *aborted, committed=3 * len(committed)
        )
        assert report.totals["aborted"] >= 3 * len(aborted), report.to_dict()
