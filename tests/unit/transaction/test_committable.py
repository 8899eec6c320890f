"""What the timeout guard and recovery read of a committable: whether a transaction was
opened at all, and when the coordinator will abort it (never, for a KIP-939 one)."""

from __future__ import annotations

import pytest

from airflow_provider_kafka2pc.transaction.committable import TWO_PHASE_TIMEOUT_MS
from tests.unit.builders import NOW, NOW_MS, TIMEOUT_MS, committable


@pytest.mark.parametrize(
    ("built", "empty", "deadline", "expires"),
    [
        pytest.param(
            committable(),
            False,
            NOW_MS + TIMEOUT_MS,
            NOW_MS + TIMEOUT_MS,
            id="classic: expires at start plus timeout",
        ),
        pytest.param(
            committable(kip939=True),
            False,
            NOW_MS + TWO_PHASE_TIMEOUT_MS,
            None,
            id="KIP-939: a nominal deadline 24.8 days ahead, but it never expires",
        ),
        pytest.param(
            committable(records=0),
            True,
            NOW_MS + TIMEOUT_MS,
            NOW_MS + TIMEOUT_MS,
            id="empty: nothing opened (callers skip its deadline)",
        ),
    ],
)
def test_a_committable_says_whether_and_when_the_coordinator_times_it_out(
    built, empty, deadline, expires
):
    assert built.is_empty is empty
    assert built.deadline_ms == deadline
    assert built.expires_at_ms == expires


def test_a_committable_survives_its_json_round_trip():
    for built in (committable(), committable(kip939=True), committable(records=0)):
        assert type(built).from_json(built.to_json()) == built
    assert committable().start_time_ms == int(NOW.timestamp() * 1000)
