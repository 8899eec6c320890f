"""Record timestamps a topic will not keep, refused before anything opens. Pure.

An export that sets each record's CreateTime from a column (``timestamp_column``) can
write timestamps far in the past. Kafka's time retention deletes a log segment once its
newest timestamp is older than ``retention.ms``: rows stamped last March, written to a
topic with the default 7 days, commit fine and are gone at the broker's next retention
check (``log.retention.check.interval.ms``, 5 min by default), with no error anywhere. The
broker also rejects, at write time, a CreateTime further than
``message.timestamp.before.max.ms`` in the past or ``message.timestamp.after.max.ms`` in
the future (1 h by default from Kafka 4.0): the write fails after the transactions opened.

:func:`timestamp_refusals` decides both from the topics' effective settings
(:class:`TopicTimestampPolicy`, read by :mod:`.topic_configs`) and the export's oldest and
newest timestamp; :func:`refuse_record_timestamps` raises
:class:`~..errors.TimestampRefusedError` naming each. The rules:

* ``cleanup.policy`` without ``delete`` (``compact`` alone): time retention does not apply;
  ``retention.ms`` = -1: none either.
* a timestamp older than ``now - retention.ms + margin`` is refused as *expiring*. The
  margin (:data:`DEFAULT_MARGIN_MS`, 1 h; at most half of ``retention.ms``, so a topic
  that keeps records for less than two margins still takes fresh ones) is there because
  the check runs before the prepare: the records are committed minutes later (a prepared
  transaction may wait up to ``transaction.max.timeout.ms``, 15 min by default, for its
  commit) and the broker checks retention every 5 min; a record inside the limit by a
  minute at check time would be deleted before a consumer could read it.
* older than ``now - message.timestamp.before.max.ms`` or newer than
  ``now + message.timestamp.after.max.ms``: *rejected* by the broker. No margin: a record
  that crosses the bound between this check and its write fails the write loudly (the
  prepare aborts), which is what the check only brings forward; a margin would refuse
  records the broker takes.
* ``message.timestamp.type=LogAppendTime``: the broker overwrites every CreateTime with its
  append time, so neither applies; a note says the column's values will not be kept.

``allow_expiring`` lets expiring records through (the caller accepts that retention may
remove them: the size of what is kept, a backfill consumed at once) but never rejected
ones: the broker refuses those whatever the caller accepts, and refusing them here spares
opening transactions that can only be aborted. Size retention (``retention.bytes``) does
not depend on timestamps and is not checked.

Retention deletes whole segments, by their newest timestamp: old records appended after
recent ones in the same segment live as long as that segment. A fresh topic's first
segment, and a segment the old records start (Kafka rolls a segment when a record is
``segment.ms`` newer than the segment's first), hold only them: deleted at the next check.
The check does not guess the layout; it refuses what retention may delete.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import TimestampRefusedError
from ..protocol.configs import ConfigEntry, ConfigSource

#: Kafka's "no limit" for a long setting (``Long.MAX_VALUE``).
LONG_MAX = 2**63 - 1
#: ``retention.ms`` / ``retention.bytes`` meaning "keep forever".
UNLIMITED = -1
#: How long records must outlive the check to count as kept; see the module's docstring.
DEFAULT_MARGIN_MS = 3_600_000
#: The option that lets expiring timestamps through, as error texts name it.
ALLOW_EXPIRING = "allow_expiring_timestamps=True"

CLEANUP_POLICY = "cleanup.policy"
RETENTION_MS = "retention.ms"
RETENTION_BYTES = "retention.bytes"
TIMESTAMP_TYPE = "message.timestamp.type"
BEFORE_MAX_MS = "message.timestamp.before.max.ms"
AFTER_MAX_MS = "message.timestamp.after.max.ms"
#: Kafka 3.x's single bound (removed in 4.0): the fallback of the two above while they
#: keep their default (Kafka's ``LogConfig``, 3.6-3.9).
DIFFERENCE_MAX_MS = "message.timestamp.difference.max.ms"
#: Every setting the check reads.
SETTINGS = (
    CLEANUP_POLICY,
    RETENTION_MS,
    RETENTION_BYTES,
    TIMESTAMP_TYPE,
    BEFORE_MAX_MS,
    AFTER_MAX_MS,
    DIFFERENCE_MAX_MS,
)

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"

#: A refusal's kinds: what would happen to the records.
EXPIRING = "expiring"
REJECTED = "rejected"


@dataclass(frozen=True)
class TopicTimestampPolicy:
    """What a topic does with a record's CreateTime, from its effective settings.

    ``sources``: setting -> who set its value (``set on the topic``, ``Kafka's default``,
    ...), for error texts.
    """

    topic: str
    cleanup_policy: frozenset[str] = frozenset({"delete"})
    retention_ms: int = 7 * 86_400_000
    retention_bytes: int = UNLIMITED
    timestamp_type: str = CREATE_TIME
    before_max_ms: int = LONG_MAX
    after_max_ms: int = 3_600_000
    sources: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_configs(
        cls, topic: str, configs: Mapping[str, ConfigEntry | str | None]
    ) -> TopicTimestampPolicy:
        """The policy from DescribeConfigs' entries (or plain values); a setting the broker
        did not answer keeps Kafka 4's default, and 3.x's ``difference.max.ms`` fills the
        two bounds still at their default, as the broker itself does."""
        values = {name: _value(entry) for name, entry in configs.items()}
        sources = {
            name: entry.source.described
            for name, entry in configs.items()
            if isinstance(entry, ConfigEntry) and entry.source is not ConfigSource.UNKNOWN
        }
        base = cls(topic)
        difference = _long(values.get(DIFFERENCE_MAX_MS), LONG_MAX)
        before = _long(values.get(BEFORE_MAX_MS), LONG_MAX)
        after = _long(values.get(AFTER_MAX_MS), base.after_max_ms)
        if before == LONG_MAX and difference != LONG_MAX:
            before, sources = difference, {**sources, BEFORE_MAX_MS: _via_difference(sources)}
        if after == LONG_MAX and difference != LONG_MAX:
            after, sources = difference, {**sources, AFTER_MAX_MS: _via_difference(sources)}
        policy = values.get(CLEANUP_POLICY)
        return cls(
            topic,
            cleanup_policy=(
                base.cleanup_policy
                if policy is None
                else frozenset(p.strip().lower() for p in policy.split(",") if p.strip())
            ),
            retention_ms=_long(values.get(RETENTION_MS), base.retention_ms),
            retention_bytes=_long(values.get(RETENTION_BYTES), base.retention_bytes),
            timestamp_type=values.get(TIMESTAMP_TYPE) or base.timestamp_type,
            before_max_ms=before,
            after_max_ms=after,
            sources=sources,
        )

    @property
    def time_retention_ms(self) -> int | None:
        """How long the topic keeps records by time; None when it never deletes by time
        (no ``delete`` in ``cleanup.policy``, or ``retention.ms`` = -1)."""
        if "delete" not in self.cleanup_policy or self.retention_ms < 0:
            return None
        return self.retention_ms

    @property
    def keeps_create_time(self) -> bool:
        """False under LogAppendTime: the broker stamps each record itself."""
        return self.timestamp_type != LOG_APPEND_TIME

    def setting(self, name: str, value: int) -> str:
        """``name=value (human form, who set it)`` for error texts."""
        origin = self.sources.get(name)
        shown = f"{value} ({_duration(value)}"
        return f"{name}={shown}, {origin})" if origin else f"{name}={shown})"


@dataclass(frozen=True)
class TimestampSpan:
    """The oldest and newest record timestamp (epoch ms) an export writes to a topic."""

    oldest_ms: int
    newest_ms: int


@dataclass(frozen=True)
class Refusal:
    """One timestamp a topic will not keep (:data:`EXPIRING`) or accept (:data:`REJECTED`)."""

    topic: str
    kind: str
    #: The setting that decides it.
    setting: str
    #: The offending timestamp and the bound it crosses (epoch ms).
    timestamp_ms: int
    limit_ms: int
    message: str


def timestamp_refusals(
    policies: Mapping[str, TopicTimestampPolicy],
    spans: Mapping[str, TimestampSpan] | TimestampSpan,
    column: str,
    now_ms: int,
    *,
    allow_expiring: bool = False,
    margin_ms: int = DEFAULT_MARGIN_MS,
) -> list[Refusal]:
    """Every refusal, per topic in ``policies`` order: its span (``spans`` per topic, or
    one for all) checked against its settings. A topic without a span writes nothing."""
    found = []
    for topic, policy in policies.items():
        span = spans if isinstance(spans, TimestampSpan) else spans.get(topic)
        if span is None or not policy.keeps_create_time:
            continue
        found += _refusals(policy, span, column, now_ms, allow_expiring, margin_ms)
    return found


def timestamp_notes(policies: Mapping[str, TopicTimestampPolicy], column: str) -> list[str]:
    """What is not refused but worth a log line: a LogAppendTime topic discards the column."""
    return [
        f"topic {topic!r} has {TIMESTAMP_TYPE}={LOG_APPEND_TIME} "
        f"({p.sources.get(TIMESTAMP_TYPE, 'as the broker answers')}): the broker stamps each "
        f"record with its append time, the values of {column!r} are not kept"
        for topic, p in policies.items()
        if not p.keeps_create_time
    ]


def refuse_record_timestamps(
    policies: Mapping[str, TopicTimestampPolicy],
    spans: Mapping[str, TimestampSpan] | TimestampSpan,
    column: str,
    now_ms: int,
    *,
    allow_expiring: bool = False,
    margin_ms: int = DEFAULT_MARGIN_MS,
) -> list[str]:
    """Raise :class:`~..errors.TimestampRefusedError` naming every refusal; else return
    the notes (:func:`timestamp_notes`) for the caller to log."""
    refusals = timestamp_refusals(
        policies, spans, column, now_ms, allow_expiring=allow_expiring, margin_ms=margin_ms
    )
    if refusals:
        lines = "\n".join(f"- {r.message}" for r in refusals)
        raise TimestampRefusedError(
            f"timestamp_column {column!r}: records the topic would not keep or accept, "
            f"refused before any transaction opened:\n{lines}",
            refusals,
        )
    return timestamp_notes(policies, column)


def _refusals(
    policy: TopicTimestampPolicy,
    span: TimestampSpan,
    column: str,
    now_ms: int,
    allow_expiring: bool,
    margin_ms: int,
) -> list[Refusal]:
    found = []
    where = f"topic {policy.topic!r}"
    value = f"the oldest value of {column!r}, {iso_ms(span.oldest_ms)},"
    if policy.before_max_ms != LONG_MAX:
        limit = now_ms - policy.before_max_ms
        if span.oldest_ms < limit:
            found.append(
                Refusal(
                    policy.topic,
                    REJECTED,
                    BEFORE_MAX_MS,
                    span.oldest_ms,
                    limit,
                    f"{value} is older than {where} accepts: "
                    f"{policy.setting(BEFORE_MAX_MS, policy.before_max_ms)} makes the broker "
                    f"reject records before {iso_ms(limit)}, so the write would fail. "
                    f"Raise the topic's {BEFORE_MAX_MS}, or leave such rows out; "
                    f"{ALLOW_EXPIRING} does not help: the broker refuses them",
                )
            )
    retention = policy.time_retention_ms
    if retention is not None and not allow_expiring:
        margin = min(margin_ms, retention // 2)
        limit = now_ms - retention + margin
        if span.oldest_ms < limit:
            found.append(
                Refusal(
                    policy.topic,
                    EXPIRING,
                    RETENTION_MS,
                    span.oldest_ms,
                    limit,
                    f"{value} is older than {where} keeps: "
                    f"{policy.setting(RETENTION_MS, retention)} with "
                    f"{CLEANUP_POLICY}={','.join(sorted(policy.cleanup_policy))} deletes a "
                    f"segment once its newest record is older than {iso_ms(limit - margin)}, "
                    "at the broker's next retention check: the committed records would "
                    f"vanish (a {_duration(margin)} margin covers the commit to come). "
                    f"Raise the topic's {RETENTION_MS} (-1 keeps records forever), use a "
                    f"compacted topic ({CLEANUP_POLICY}=compact), or pass {ALLOW_EXPIRING} "
                    "to export them anyway",
                )
            )
    if policy.after_max_ms != LONG_MAX:
        limit = now_ms + policy.after_max_ms
        if span.newest_ms > limit:
            found.append(
                Refusal(
                    policy.topic,
                    REJECTED,
                    AFTER_MAX_MS,
                    span.newest_ms,
                    limit,
                    f"the newest value of {column!r}, {iso_ms(span.newest_ms)}, is further in the "
                    f"future than {where} accepts: "
                    f"{policy.setting(AFTER_MAX_MS, policy.after_max_ms)} makes the broker "
                    f"reject records after {iso_ms(limit)}, so the write would fail. Fix the "
                    f"column's values, or raise the topic's {AFTER_MAX_MS}; {ALLOW_EXPIRING} "
                    "does not help: the broker refuses them",
                )
            )
    return found


def iso_ms(epoch_ms: int) -> str:
    """``2026-03-01T00:00:00.000Z (1772323200000 ms)``: both forms, so a reader can match
    the value in the source and in the log."""
    try:
        moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return f"{epoch_ms} ms"
    return f"{moment.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} ({epoch_ms} ms)"


def _duration(ms: int) -> str:
    if ms == LONG_MAX:
        return "no limit"
    for unit, size in (("days", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"


def _value(entry: ConfigEntry | str | None) -> str | None:
    return entry.value if isinstance(entry, ConfigEntry) else entry


def _long(value: str | None, default: int) -> int:
    return default if value is None or value == "" else int(value)


def _via_difference(sources: Mapping[str, str]) -> str:
    origin = sources.get(DIFFERENCE_MAX_MS)
    return f"from {DIFFERENCE_MAX_MS}" + (f", {origin}" if origin else "")
