"""What one recovery round found and did, JSON-ready."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RecoveryReport:
    """What one recovery round found and did; JSON-ready (``to_dict``/``from_dict``).

    Keys are transactional ids for broker transactions and ``export/run key`` for batches.
    """

    export_id: str = ""
    id_prefixes: list[str] = field(default_factory=list)
    dry_run: bool = False
    #: Per prefix: how its open transactions were found.
    discovery: dict[str, str] = field(default_factory=dict)
    #: Every open transaction found, with the batch holding it and the planned action.
    found: list[dict[str, Any]] = field(default_factory=list)
    #: Batches finished: label -> final state and records.
    batches: dict[str, str] = field(default_factory=dict)
    committed: dict[str, str] = field(default_factory=dict)
    aborted: dict[str, str] = field(default_factory=dict)
    fenced: dict[str, str] = field(default_factory=dict)
    #: Found open, but ended by someone else before this round acted.
    ended: dict[str, str] = field(default_factory=dict)
    #: Not resolved (retried next round): key -> why.
    left: dict[str, str] = field(default_factory=dict)
    #: Keys of ``left`` that a live run may still finish (within the grace period).
    live: list[str] = field(default_factory=list)
    #: The waiting run's own batch, carried on by its own tasks (not left).
    own: dict[str, str] = field(default_factory=dict)
    #: Needs a person, retrying will not help (a lost participant of a COMMIT verdict...).
    failed: dict[str, str] = field(default_factory=dict)
    #: A dry run: what a real run would do.
    planned: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def done(self) -> bool:
        """Nothing left, nothing failed, and (dry run) nothing to do."""
        return not (self.left or self.failed or self.planned)

    def settled(self, wait_for_live: bool) -> bool:
        """Done, or (``wait_for_live`` False) only live runs' transactions left."""
        if wait_for_live or self.failed or self.planned:
            return self.done
        return all(key in self.live for key in self.left)

    def leave(self, key: str, why: str, *, live: bool = False) -> None:
        self.left[key] = why
        if live and key not in self.live:
            self.live.append(key)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "done": self.done}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RecoveryReport:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})

    def summary(self) -> str:
        counts = {
            "found": len(self.found),
            "batches": len(self.batches),
            "committed": len(self.committed),
            "aborted": len(self.aborted),
            "fenced": len(self.fenced),
            "left": len(self.left),
            "failed": len(self.failed),
        }
        if self.dry_run:
            counts["planned"] = len(self.planned)
        return ", ".join(f"{k} {v}" for k, v in counts.items())
