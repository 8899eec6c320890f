"""Every row of docs/broker-answers.md, replayed live on Apache Kafka 4.4.0 and 3.9.2.

For each situation: (a) the raw EndTxn answers the controller received equal the
document's row for this Kafka version (so the document cannot go stale silently), and
(b) END_TXN_ACTIONS classifies them as the rule says (success -> verify, anything else
-> resolve from the log) and the controller's outcome is the right one. Every row ends
with the audit and a read_committed consumer agreeing.

The scenarios are shared with scripts/broker_answers.py, which wrote the document:
devtools/broker_answers.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_provider_kafka2pc.protocol.codes import ErrorCode
from airflow_provider_kafka2pc.transaction.controller import END_TXN_ACTIONS, EndTxnAction
from devtools.broker_answers import (
    CLASSIC_HEADING,
    COL_ACTION,
    COL_ANSWER,
    COL_BEFORE,
    COL_OUTCOME,
    COL_V5,
    KIP890_HEADING,
    SCENARIOS,
    Flavor,
    Lab,
    answer_cell,
    read_document,
    run_scenario,
    scenario,
)
from tests.conftest import REAL_KAFKA_ENV, assert_exactly_once

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "broker-answers.md"
HEADINGS = {Flavor.CLASSIC: CLASSIC_HEADING, Flavor.KIP890: KIP890_HEADING}


@pytest.fixture(scope="module")
def documented():
    return read_document(DOCUMENT)


def test_the_document_has_every_row_for_both_versions(documented):
    for version in ("4.4.0", "3.9.2"):
        assert set(documented[(version, CLASSIC_HEADING)]) == {s.situation for s in SCENARIOS}
    assert set(documented[("4.4.0", KIP890_HEADING)]) == {s.situation for s in SCENARIOS}
    assert ("3.9.2", KIP890_HEADING) not in documented  # no KIP-890 before 4.0


@pytest.mark.kafka_versions()
@pytest.mark.parametrize("situation", [s.situation for s in SCENARIOS])
def test_end_txn_answers_and_the_controller(
    situation, kafka_version, documented, settings, protocol, topic, bootstrap
):
    sc = scenario(situation)
    lab = Lab(settings, protocol, topic)
    row = run_scenario(lab, sc)
    # The document is about the local brokers of these versions; a cluster named by the
    # environment may be any version: there only the controller's verdicts are checked.
    compare = not os.environ.get(REAL_KAFKA_ENV)

    for flavor, obs in row.observations.items():
        if flavor is Flavor.CLASSIC_V5:
            continue
        # (b) the controller's classification and outcome
        first = ErrorCode[obs.answers[0]]
        assert END_TXN_ACTIONS[first].name == obs.action == sc.action, (flavor, obs)
        if first != ErrorCode.NONE:
            assert END_TXN_ACTIONS[first] is not EndTxnAction.VERIFY  # never read as success
        assert obs.outcome == sc.expected, (flavor, obs.detail)
        if compare:
            # (a) what the broker answered, as documented for this version
            doc = documented[(kafka_version, HEADINGS[flavor])][situation]
            cell = answer_cell(obs.end_txn_version, obs.answers)
            assert cell == doc[COL_ANSWER], (flavor, obs)
            assert obs.before == doc[COL_BEFORE], (flavor, obs)
            assert (obs.action, obs.outcome) == (doc[COL_ACTION], doc[COL_OUTCOME])
    if sc.expected == "TransactionInDoubtError":
        detail = row.observations[Flavor.CLASSIC].detail
        assert "INVALID_PRODUCER_ID_MAPPING" in detail and "Nothing was changed" in detail

    if compare:
        classic_doc = documented[(kafka_version, CLASSIC_HEADING)][situation]
        if Flavor.CLASSIC_V5 in row.observations:
            v5 = row.observations[Flavor.CLASSIC_V5].answers
            assert " → ".join(v5) == classic_doc[COL_V5]
        else:
            assert COL_V5 not in classic_doc  # 3.9 has no EndTxn v5

    # Classic transactions are ended with EndTxn <= v4 on every broker; KIP-890 with v5.
    assert row.observations[Flavor.CLASSIC].end_txn_version <= 4
    if Flavor.KIP890 in row.observations:
        assert row.observations[Flavor.KIP890].end_txn_version == 5

    assert_exactly_once(
        protocol,
        bootstrap,
        topic,
        *row.committables,
        committed=row.expected_committed,
        aborted=row.expected_aborted,
    )
