"""FindCoordinator for many ids at once (v4+, KIP-699): the request and its answer."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_provider_kafka2pc.protocol.metadata import (
    TRANSACTION_COORDINATOR,
    find_coordinators_request,
    parse_find_coordinators,
)


def test_the_request_carries_every_id_as_a_transaction_key():
    request = find_coordinators_request(["a-0", "a-1"], 4)
    assert request.coordinator_keys == ["a-0", "a-1"]
    assert request.key_type == TRANSACTION_COORDINATOR


def test_one_key_versions_are_refused():
    with pytest.raises(ValueError, match="v3 takes one key"):
        find_coordinators_request(["a-0", "a-1"], 3)


def test_the_answer_gives_each_id_its_code_and_node():
    answer = SimpleNamespace(
        coordinators=[
            SimpleNamespace(key="a-0", error_code=0, node_id=3),
            SimpleNamespace(key="a-1", error_code=15, node_id=-1),
        ]
    )
    assert parse_find_coordinators(answer) == {"a-0": (0, 3), "a-1": (15, -1)}
