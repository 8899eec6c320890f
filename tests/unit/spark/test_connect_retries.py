"""The Connect client's retry policy for a prepare: one window per session, not per call."""

from __future__ import annotations

import grpc
import pytest
from pyspark.sql.connect.client.retries import Retrying

from airflow_provider_kafka2pc.spark.connect import MAX_BACKOFF_MS, RETRIES
from airflow_provider_kafka2pc.spark.connect_retries import LostServerPolicy, window_s

pytestmark = pytest.mark.unit


class Unavailable(grpc.RpcError):
    """What the client gets from a server that is gone: the connection refused."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "failed to connect to all addresses"

    def trailing_metadata(self) -> tuple:
        return ()  # no RetryInfo: the client's own backoff applies


def call(policy: LostServerPolicy, failures: int, slept: list[float]) -> int:
    """One RPC under ``policy`` that fails ``failures`` times (then succeeds); its attempts."""
    attempts = 0
    for attempt in Retrying([policy], sleep=slept.append):
        with attempt:
            attempts += 1
            if attempts <= failures:
                raise Unavailable()
    return attempts


def test_one_call_spends_the_window_then_every_later_call_fails_at_once():
    policy, slept = LostServerPolicy(RETRIES, MAX_BACKOFF_MS), []
    with pytest.raises(Unavailable):
        call(policy, failures=100, slept=slept)
    assert len(slept) == RETRIES and policy.lost
    assert 44.25 <= sum(slept) <= window_s(policy) == 46.75

    later: list[float] = []
    with pytest.raises(Unavailable):  # the cleanup's unset, ReleaseSession: no wait
        call(policy, failures=100, slept=later)
    assert later == []


def test_a_server_back_within_the_window_keeps_its_retries():
    policy, slept = LostServerPolicy(RETRIES, MAX_BACKOFF_MS), []
    assert call(policy, failures=RETRIES, slept=slept) == RETRIES + 1
    assert not policy.lost
    assert call(policy, failures=3, slept=slept) == 4  # a fresh window for the next call
