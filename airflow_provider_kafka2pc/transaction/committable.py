"""The committable: the minimal, immutable handle from which any process can finish a transaction.

It is what a writer hands over after its records are flushed and its transaction left
open. Everything needed to end that transaction later, from another process, is here:
the transactional id, the producer id and epoch the coordinator knows it by, and the
transaction version (which fixes the EndTxn request version it must be ended with).
The offsets let the outcome be verified from the log's markers.

A KIP-939 two-phase-commit transaction (``kip939``) is finished the same way;
it differs only in that the coordinator never times it out (docs/kip-939.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import CommittableError, ConfigurationError
from ..naming import validate_transactional_id

SCHEMA_VERSION = 1
NO_PRODUCER_ID = -1

#: librdkafka implements only the classic protocol (TV1): end with EndTxn <= v4.
TRANSACTION_VERSION_CLASSIC = 1
#: KIP-890 transactions (TV2): end with EndTxn v5; the epoch is bumped at every end.
TRANSACTION_VERSION_KIP890 = 2
TRANSACTION_VERSIONS = (TRANSACTION_VERSION_CLASSIC, TRANSACTION_VERSION_KIP890)
#: The timeout the coordinator stores for a KIP-939 2PC transaction (Int.MaxValue),
#: whatever was asked; its timeout reaper skips such transactions altogether.
TWO_PHASE_TIMEOUT_MS = 2**31 - 1


@dataclass(frozen=True)
class PartitionRange:
    """Where a transaction's records landed in one topic-partition (offsets inclusive)."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    record_count: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "record_count": self.record_count,
        }


@dataclass(frozen=True)
class Committable:
    """A prepared (open) Kafka transaction that any process may commit or abort."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    transaction_version: int
    partitions: tuple[PartitionRange, ...]
    record_count: int
    start_time_ms: int
    transaction_timeout_ms: int
    schema: int = field(default=SCHEMA_VERSION)
    #: Opened with KIP-939's enable2Pc: the coordinator never aborts it by timeout.
    #: Optional in JSON (absent = False), so committables written before it still read.
    kip939: bool = False

    @property
    def is_empty(self) -> bool:
        """True when no record was written, so no transaction was ever opened."""
        return self.record_count == 0

    @property
    def deadline_ms(self) -> int:
        """Start plus the coordinator's stored timeout (epoch ms).

        For a 2PC transaction that lies about 24.8 days ahead, yet nothing happens
        then: use :attr:`expires_at_ms` where "never" matters.
        """
        return self.start_time_ms + self.transaction_timeout_ms

    @property
    def expires_at_ms(self) -> int | None:
        """When the coordinator will abort this transaction by timeout (epoch ms);
        None when it never will (a KIP-939 2PC transaction): no deadline to guard."""
        return None if self.kip939 else self.deadline_ms

    @classmethod
    def empty(cls, transactional_id: str, start_time_ms: int, timeout_ms: int) -> Committable:
        return cls(
            transactional_id=transactional_id,
            producer_id=NO_PRODUCER_ID,
            producer_epoch=-1,
            transaction_version=TRANSACTION_VERSION_CLASSIC,
            partitions=(),
            record_count=0,
            start_time_ms=start_time_ms,
            transaction_timeout_ms=timeout_ms,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "transaction_version": self.transaction_version,
            "partitions": [p.to_dict() for p in self.partitions],
            "record_count": self.record_count,
            "start_time_ms": self.start_time_ms,
            "transaction_timeout_ms": self.transaction_timeout_ms,
            # Written only when set: classic committables keep their exact old form.
            **({"kip939": True} if self.kip939 else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Committable:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CommittableError(f"committable is not valid JSON: {exc}") from exc
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: object) -> Committable:
        """Parse and validate; every failure names the offending field."""
        if not isinstance(data, dict):
            raise CommittableError("committable must be a JSON object")
        schema = _int(data, "schema", minimum=1)
        if schema != SCHEMA_VERSION:
            raise CommittableError(
                f"committable field 'schema' is {schema}; this version reads {SCHEMA_VERSION}"
            )
        try:
            tid = validate_transactional_id(data.get("transactional_id"))
        except ConfigurationError as exc:
            raise CommittableError(f"committable field {exc}") from exc
        version = _int(data, "transaction_version", minimum=1)
        if version not in TRANSACTION_VERSIONS:
            raise CommittableError(
                f"committable field 'transaction_version' must be one of {TRANSACTION_VERSIONS}"
            )
        raw_parts = data.get("partitions")
        if not isinstance(raw_parts, list):
            raise CommittableError("committable field 'partitions' must be a list")
        parts = tuple(_partition(p, i) for i, p in enumerate(raw_parts))
        count = _int(data, "record_count", minimum=0)
        if count != sum(p.record_count for p in parts):
            raise CommittableError(
                "committable field 'record_count' does not equal the sum of its partitions'"
            )
        minimum_pid = NO_PRODUCER_ID if count == 0 else 0
        committable = cls(
            transactional_id=tid,
            producer_id=_int(data, "producer_id", minimum=minimum_pid),
            producer_epoch=_int(data, "producer_epoch", minimum=-1 if count == 0 else 0),
            transaction_version=version,
            partitions=parts,
            record_count=count,
            start_time_ms=_int(data, "start_time_ms", minimum=0),
            transaction_timeout_ms=_int(data, "transaction_timeout_ms", minimum=1),
            schema=schema,
            kip939=_kip939(data),
        )
        if committable.producer_epoch > 32767:
            raise CommittableError("committable field 'producer_epoch' exceeds 32767")
        if committable.kip939 and committable.transaction_timeout_ms != (TWO_PHASE_TIMEOUT_MS):
            # A 2PC flag on a transaction that does time out would disarm the timeout guard.
            raise CommittableError(
                "committable field 'transaction_timeout_ms' must be "
                f"{TWO_PHASE_TIMEOUT_MS} (the coordinator's own) when 'kip939' "
                f"is true, got {committable.transaction_timeout_ms}"
            )
        return committable


def _kip939(data: dict[str, Any]) -> bool:
    # Committables recorded before the rename carry the flag as "two_phase_commit".
    name = "kip939" if "kip939" in data else "two_phase_commit"
    value = data.get(name, False)
    if not isinstance(value, bool):
        raise CommittableError(f"committable field {name!r} must be true or false, got {value!r}")
    return value


def _int(data: dict[str, Any], name: str, minimum: int, where: str = "committable") -> int:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CommittableError(f"{where} field {name!r} must be an integer, got {value!r}")
    if value < minimum:
        raise CommittableError(f"{where} field {name!r} must be >= {minimum}, got {value}")
    return value


def _partition(data: object, index: int) -> PartitionRange:
    where = f"committable partitions[{index}]"
    if not isinstance(data, dict):
        raise CommittableError(f"{where} must be an object")
    topic = data.get("topic")
    if not isinstance(topic, str) or not topic:
        raise CommittableError(f"{where} field 'topic' must be a non-empty string")
    part = PartitionRange(
        topic=topic,
        partition=_int(data, "partition", 0, where),
        first_offset=_int(data, "first_offset", 0, where),
        last_offset=_int(data, "last_offset", 0, where),
        record_count=_int(data, "record_count", 1, where),
    )
    if part.last_offset < part.first_offset:
        raise CommittableError(f"{where} field 'last_offset' is before 'first_offset'")
    return part
