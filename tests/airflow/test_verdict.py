"""The decision rule against the real broker and ledger (no Airflow, no Spark).

Every reason for ABORT is provoked for real: a fenced participant (seen through
DescribeTransactions, and through the log's markers where a broker lacks it), a commit
margin the earliest timeout does not leave, records that do not add up.
"""

from __future__ import annotations

import time

import pytest

from airflow_provider_kafka2pc.coordination.decision import assess, not_open
from airflow_provider_kafka2pc.ledger import Verdict
from airflow_provider_kafka2pc.protocol.versions import ApiKey
from airflow_provider_kafka2pc.transaction.controller import TransactionController
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from tests.conftest import assert_exactly_once

ROWS = 20


class WithoutDescribeTransactions:
    """The broker as one older than Kafka 3.0 answers: no DescribeTransactions."""

    def __init__(self, protocol):
        self._protocol = protocol

    def api_version(self, api, cap=None):
        if api == ApiKey.DESCRIBE_TRANSACTIONS:
            return None
        return self._protocol.api_version(api, cap)

    def __getattr__(self, name):
        return getattr(self._protocol, name)


def prepared(store, settings, topic, export_id, *, source_rows=ROWS, timeout_ms=120_000):
    batch = store.begin(export_id, "k", topic=topic, id_prefix=export_id, num_partitions=2)
    committables = [
        TransactionalWriter(settings, tid, transaction_timeout_ms=timeout_ms).write(
            topic, [(f"{tid}-{n}".encode(), b"{}") for n in range(ROWS // 2)]
        )
        for tid in batch.transactional_ids
    ]
    batch = store.record_prepared(export_id, "k", committables, source_rows=source_rows)
    return batch, store.participants(export_id, "k")


def judge(batch, participants, protocol, margin_s=60):
    now_ms = int(time.time() * 1000)
    return assess(batch, participants, protocol, now_ms=now_ms, commit_margin_ms=margin_s * 1000)


@pytest.mark.kafka_versions()
def test_commit_only_while_every_participant_is_open_with_margin(
    ledger, protocol, settings, make_topic, bootstrap
):
    topic = make_topic(2)
    with ledger.open() as store:
        batch, parts = prepared(store, settings, topic, "verdict-open")
        ok = judge(batch, parts, protocol)
        assert ok.verdict is Verdict.COMMIT, ok
        assert ok.earliest_deadline_ms == min(p.committable.deadline_ms for p in parts)
        tight = judge(batch, parts, protocol, margin_s=300)  # the timeout is 120 s
        assert tight.verdict is Verdict.ABORT and "commit margin" in tight.reason

        TransactionController(protocol).fence(parts[1].transactional_id)
        for seen_by in (protocol, WithoutDescribeTransactions(protocol)):
            fenced = judge(batch, parts, seen_by)
            assert fenced.verdict is Verdict.ABORT, fenced
            assert parts[1].transactional_id in fenced.reason
            assert parts[0].transactional_id not in fenced.reason
        committables = [p.committable for p in parts]
        assert list(not_open(WithoutDescribeTransactions(protocol), committables)) == [
            parts[1].transactional_id
        ]
        TransactionController(protocol).abort_all(committables[:1])
    # Both witnesses: the fenced and the aborted participant alike, nothing committed or open.
    assert_exactly_once(protocol, bootstrap, topic, *committables, committed=0, aborted=ROWS)


def test_abort_when_the_records_do_not_add_up(ledger, protocol, settings, make_topic, bootstrap):
    topic = make_topic(1)
    with ledger.open() as store:
        batch, parts = prepared(store, settings, topic, "verdict-count", source_rows=ROWS + 1)
        short = judge(batch, parts, protocol)
        assert short.verdict is Verdict.ABORT
        assert f"hold {ROWS} records but the source had {ROWS + 1}" in short.reason
        TransactionController(protocol).abort_all([p.committable for p in parts])
    assert_exactly_once(
        protocol, bootstrap, topic, *[p.committable for p in parts], committed=0, aborted=ROWS
    )
