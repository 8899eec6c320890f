"""The coordinator ledger: durable batches, verdicts, participants and pooled transactional ids.

SQLAlchemy Core on SQLite (the embedded default) or PostgreSQL, migrated by Alembic.
Free of Airflow imports, like :mod:`airflow_provider_kafka2pc.transaction`.
"""

from ..errors import (
    ConflictError,
    IllegalTransitionError,
    LedgerError,
    NotFoundError,
    PrefixOwnedError,
)
from .key import BatchKey
from .states import (
    BATCH_TRANSITIONS,
    PARTICIPANT_TRANSITIONS,
    BatchState,
    ParticipantState,
    Verdict,
)
from .store import Batch, Lease, Ledger, Participant

__all__ = [
    "BATCH_TRANSITIONS",
    "PARTICIPANT_TRANSITIONS",
    "Batch",
    "BatchKey",
    "BatchState",
    "ConflictError",
    "IllegalTransitionError",
    "Lease",
    "Ledger",
    "LedgerError",
    "NotFoundError",
    "Participant",
    "ParticipantState",
    "PrefixOwnedError",
    "Verdict",
]
