"""A check that must not refuse a topic created just before: asked again while the broker
does not know it yet, within a bound, and nothing else asked again."""

from __future__ import annotations

import pytest

from airflow_provider_kafka2pc.defaults import TOPIC_WAIT_S
from airflow_provider_kafka2pc.errors import ProtocolError
from airflow_provider_kafka2pc.protocol import client
from airflow_provider_kafka2pc.protocol.client import asked_until_known


class _Metadata:
    """A broker that learns of the topic after ``unknown`` answers (the first of them
    ``first``), or never."""

    def __init__(self, unknown: int, first: str = "UNKNOWN_TOPIC_OR_PARTITION") -> None:
        self.asked = 0
        self.unknown = unknown
        self.first = first

    def ask(self) -> dict[int, int]:
        self.asked += 1
        if self.asked <= self.unknown:
            name = self.first if self.asked == 1 else "LEADER_NOT_AVAILABLE"
            raise ProtocolError(f"t: {name}", name)
        return {0: 1, 1: 1}


def test_a_topic_the_broker_learns_of_late_is_waited_for_a_missing_one_not_for_ever(
    monkeypatch,
):
    naps: list[float] = []
    monkeypatch.setattr(client.time, "sleep", naps.append)
    late = _Metadata(unknown=2)
    assert asked_until_known(late.ask, TOPIC_WAIT_S) == {0: 1, 1: 1} and late.asked == 3
    clock = iter(range(0, 100))  # one second per look at the clock
    monkeypatch.setattr(client.time, "monotonic", lambda: next(clock))
    missing = _Metadata(unknown=10**6)
    with pytest.raises(ProtocolError, match="LEADER_NOT_AVAILABLE"):
        asked_until_known(missing.ask, TOPIC_WAIT_S)
    assert missing.asked == int(TOPIC_WAIT_S)  # asked at 0 s, 1 s, 2 s; 3 s: done
    refused = _Metadata(unknown=1, first="TOPIC_AUTHORIZATION_FAILED")  # not asked again
    with pytest.raises(ProtocolError, match="AUTHORIZATION"):
        asked_until_known(refused.ask, TOPIC_WAIT_S)
    assert refused.asked == 1
