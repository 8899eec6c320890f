"""The identity of one batch, built and shown in one place."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class BatchKey:
    """One batch of the ledger: (export id, run key), shown as ``export/run key``.

    The run key itself may hold a slash (a data interval ``start/end``), so :meth:`parse`
    splits at the first one: an export id never holds one.
    """

    export_id: str
    run_key: str

    def __str__(self) -> str:
        return f"{self.export_id}/{self.run_key}"

    @classmethod
    def parse(cls, text: str) -> BatchKey:
        export_id, slash, run_key = text.partition("/")
        if not (export_id and slash and run_key):
            raise ValueError(f"{text!r} is not a batch key 'export/run key'")
        return cls(export_id, run_key)

    def job_label(self, attempt: int, suffix: str = "") -> str:
        """What the prepare job of one attempt is called in its logs and manifest."""
        return f"{self}#{attempt}{suffix}"
