"""The Connect client's retries for a prepare: one window per session, not one per call.

PySpark's client retries each RPC on its own (``UNAVAILABLE``: the server cannot be
reached) with a fresh budget. When the server dies mid-prepare, the write's call spends
its window and fails; then each cleanup call on the way out (the ``finally`` blocks'
``conf.unset``, ``spark.stop()``'s ReleaseSession, the ReleaseExecute calls ``close()``
waits for) spent a window of its own against the same dead server. Measured on a server
SIGKILLed while the transactions were open (py-spy dumps of the task's process every 5 s):
the prepare failed 137 s after the kill; the write's retries ran until 46-51 s after it,
``source_splits``' ``conf.unset`` until 87-92 s, ReleaseSession until the end. With
:class:`LostServerPolicy`: 46.4 s, the write's window alone
(``tests/airflow/test_export_connect.py``, the bound in docs/spark-connect.md).
"""

from __future__ import annotations

from pyspark.sql.connect.client.retries import DefaultPolicy, RetryPolicyState


class LostServerPolicy(DefaultPolicy):
    """PySpark's default policy bounded to ``max_retries`` retries at most ``max_backoff``
    ms apart, given up for good once one call has spent them all: every later call of the
    session then fails on its first attempt.

    One instance per session (its ``lost`` is that session's). A server that came back
    in the meantime would not help: the session, its artifacts and its execution lived in
    the lost server's memory.
    """

    def __init__(self, max_retries: int, max_backoff: int) -> None:
        super().__init__(max_retries=max_retries, max_backoff=max_backoff)
        self.lost = False

    def can_retry(self, e: BaseException) -> bool:
        return not self.lost and super().can_retry(e)

    def to_state(self) -> RetryPolicyState:
        return _WindowState(self)


class _WindowState(RetryPolicyState):
    """One call's retries; spending them marks the policy's server lost."""

    def next_attempt(self, exception: BaseException | None = None) -> int | None:
        wait = super().next_attempt(exception)
        if wait is None:
            self.policy.lost = True  # type: ignore[attr-defined]
        return wait


def window_s(policy: DefaultPolicy) -> float:
    """The longest one call waits between its attempts under ``policy``: every backoff at
    its cap and its jitter (the bound a lost server's prepare fails within, plus the
    attempts themselves: refused at once by a host whose server died)."""
    total, backoff = 0.0, float(policy.initial_backoff)
    for _ in range(policy.max_retries or 0):
        total += backoff + (policy.jitter if backoff >= policy.min_jitter_threshold else 0)
        backoff = min(float(policy.max_backoff or backoff), backoff * policy.backoff_multiplier)
    return total / 1000
