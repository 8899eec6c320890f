"""The broker's half of the record-timestamp check: read the topics' settings, then refuse.

:func:`check_record_timestamps` is the one call a prepare makes before it opens anything:
one DescribeConfigs for every topic (any broker answers; the effective values, topic
settings over broker defaults, with their sources), then the pure rules of
:mod:`.retention`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from ..connection.acls import authorization_failure
from ..errors import ConfigurationError, ProtocolError
from ..protocol.configs import ConfigEntry
from .retention import (
    DEFAULT_MARGIN_MS,
    SETTINGS,
    TimestampSpan,
    TopicTimestampPolicy,
    refuse_record_timestamps,
)


class TopicConfigsProtocol(Protocol):
    """What the check needs from a broker (:class:`~..protocol.client.KafkaProtocol`)."""

    def describe_topic_configs(
        self, topics: Sequence[str], names: Sequence[str] | None = None
    ) -> dict[str, dict[str, ConfigEntry]]: ...


class ConfigsRefusedError(ConfigurationError):
    """The broker refused DescribeConfigs of a topic for lack of an ACL (DESCRIBE_CONFIGS
    on the topic, which WRITE and READ do not imply)."""


def topic_timestamp_policies(
    broker: TopicConfigsProtocol | object, topics: Sequence[str]
) -> dict[str, TopicTimestampPolicy]:
    """Each topic's :class:`~.retention.TopicTimestampPolicy`, in ``topics`` order, from one
    DescribeConfigs. ``broker``: a :class:`~..protocol.client.KafkaProtocol`, or a
    :class:`~.controller.TransactionController` (its connection is used). A topic the
    broker does not know: ConfigurationError naming it; one this principal may not
    describe the configs of: :class:`ConfigsRefusedError`."""
    names = list(dict.fromkeys(topics))
    if not names:
        return {}
    try:
        described = _protocol(broker).describe_topic_configs(names, SETTINGS)
    except ProtocolError as exc:
        if authorization_failure(exc) is not None:
            raise ConfigsRefusedError(
                f"the settings of topic(s) {', '.join(map(repr, names))} are not readable: "
                f"{exc}; grant this principal DESCRIBE_CONFIGS on the topic (WRITE and READ "
                "do not imply it)"
            ) from None
        raise ConfigurationError(f"topic settings not readable: {exc}") from None
    return {t: TopicTimestampPolicy.from_configs(t, described.get(t, {})) for t in names}


def check_record_timestamps(
    broker: TopicConfigsProtocol | object,
    topics: Sequence[str],
    oldest_ms: int | None,
    newest_ms: int | None,
    column: str,
    *,
    allow_expiring: bool = False,
    now_ms: int | None = None,
    margin_ms: int = DEFAULT_MARGIN_MS,
    spans: Mapping[str, TimestampSpan] | None = None,
) -> list[str]:
    """Refuse (:class:`~..errors.TimestampRefusedError`) record timestamps ``topics`` would
    not keep or accept, before any transaction opens; return notes to log otherwise.

    ``oldest_ms``/``newest_ms``: the export's oldest and newest value of ``column`` (epoch
    ms), for every topic; ``spans`` per topic instead, where rows are routed among several.
    None (no row, or every value null): nothing to check, no broker call. ``now_ms``:
    the broker's "now" as this host sees it (default: the clock). ``allow_expiring``: let
    timestamps retention would delete through, never those the broker rejects
    (:mod:`.retention`). A principal without DESCRIBE_CONFIGS on a topic: the check is
    skipped and a note says so.
    """
    if spans is None:
        if oldest_ms is None or newest_ms is None:
            return []
        spans = dict.fromkeys(topics, TimestampSpan(oldest_ms, newest_ms))
    if not spans:
        return []
    try:
        policies = topic_timestamp_policies(broker, [t for t in topics if t in spans])
    except ConfigsRefusedError as exc:
        # An export's ACLs (`kafka2pc acls`) need not include DESCRIBE_CONFIGS: the check
        # is skipped, said, rather than failing exports that ran before it existed.
        return [f"record timestamps of {column!r} not checked against retention: {exc}"]
    return refuse_record_timestamps(
        policies,
        spans,
        column,
        int(time.time() * 1000) if now_ms is None else now_ms,
        allow_expiring=allow_expiring,
        margin_ms=margin_ms,
    )


def _protocol(broker: object) -> TopicConfigsProtocol:
    """The connection of a controller, or ``broker`` itself."""
    if hasattr(broker, "describe_topic_configs"):
        return broker  # type: ignore[return-value]
    protocol = getattr(broker, "protocol", None)
    if protocol is None or not hasattr(protocol, "describe_topic_configs"):
        raise TypeError(f"{type(broker).__name__} cannot describe topic configs")
    return protocol
