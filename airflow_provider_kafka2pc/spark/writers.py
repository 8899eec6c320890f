"""Who writes a prepare's transactions: the choice, named once, free of heavy imports.

``python``: confluent-kafka in Spark's Python workers (:mod:`.partition_writer`).
``jvm``: Kafka's Java producer inside the executors (:mod:`.jvm_writer`,
docs/jvm-writer.md). Both report the same committables; which rows each transaction holds
is decided by Spark before either writes, so a loss repair may use either.
"""

from __future__ import annotations

from ..errors import ConfigurationError

PYTHON_WRITER = "python"
JVM_WRITER = "jvm"
WRITERS = (PYTHON_WRITER, JVM_WRITER)


def check_writer(writer: object) -> str:
    """``writer`` if it names one of :data:`WRITERS`; else a clear error."""
    if writer not in WRITERS:
        raise ConfigurationError(f"writer must be one of {WRITERS}, got {writer!r}")
    return str(writer)
