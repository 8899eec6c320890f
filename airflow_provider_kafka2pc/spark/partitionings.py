"""How a prepare is asked to partition its rows: the choice, named once, free of heavy imports.

``auto`` (the default): the source's own file splits where the plan pins them (no
shuffle, :mod:`.source_splits`), else a shuffle aligned with Kafka where that applies
(:mod:`.alignment`), else a shuffle by hash. ``source-splits``, ``kafka-aligned`` and
``hash`` ask for one; None is the shuffle of earlier releases (aligned by
``align_with_kafka``). What was used, and why not what was asked, goes to the manifest
and the ledger (docs/partitioning.md).
"""

from __future__ import annotations

from ..errors import ConfigurationError
from ..transaction.manifest import ALIGNED, HASH, SOURCE

AUTO_PARTITIONING = "auto"
#: What a prepare may be asked for (None too: a shuffle, aligned by ``align_with_kafka``).
REQUESTS = (AUTO_PARTITIONING, SOURCE, ALIGNED, HASH)


def check_partitioning(partitioning: object, align_with_kafka: bool = True) -> str | None:
    """``partitioning`` if it names one of :data:`REQUESTS` (or is None); else a clear error."""
    if partitioning is not None and partitioning not in REQUESTS:
        raise ConfigurationError(
            f"partitioning must be one of {REQUESTS} or None, got {partitioning!r}"
        )
    if partitioning == ALIGNED and not align_with_kafka:
        raise ConfigurationError(
            f"partitioning={ALIGNED!r} contradicts align_with_kafka=False; ask for {HASH!r}"
        )
    return None if partitioning is None else str(partitioning)
