"""Who writes a prepare's transactions: the choice, named once, free of heavy imports.

``python``: confluent-kafka in Spark's Python workers (:mod:`.partition_writer`).
``jvm``: Kafka's Java producer inside the executors (:mod:`.jvm_writer`,
docs/jvm-writer.md). ``auto`` (the default): the JVM writer wherever it applies (a classic
session whose JVM loads the project's jar and kafka-clients), the Python writer where it
does not (Spark Connect, a cluster without the jars, an ``on_batch`` hook); the manifest
records the one used and why not the JVM one. Both report the same committables; which
rows each transaction holds is decided by Spark before either writes, so a loss repair
may use either.
"""

from __future__ import annotations

from ..errors import ConfigurationError

AUTO_WRITER = "auto"
PYTHON_WRITER = "python"
JVM_WRITER = "jvm"
WRITERS = (AUTO_WRITER, PYTHON_WRITER, JVM_WRITER)


def check_writer(writer: object) -> str:
    """``writer`` if it names one of :data:`WRITERS`; else a clear error."""
    if writer not in WRITERS:
        raise ConfigurationError(f"writer must be one of {WRITERS}, got {writer!r}")
    return str(writer)
