"""Apache Kafka's own broker on loopback, fetched from Maven Central: the embedded default.

:func:`fetch_kafka` resolves ``org.apache.kafka:kafka_2.13`` with Apache Ivy (shipped
inside PySpark, run with the Java that Spark needs anyway) into a cache directory, once
per version; :class:`KafkaBroker` runs one KRaft node (broker and controller in one JVM)
from those jars, :class:`KafkaCluster` three or more replicated ones. Used by
``python -m devtools broker``, the demo, the tests and the benchmarks; not part of the
installed package (users bring their own Kafka).

The names load on first use: ``python -m devtools broker --help`` reads only
:data:`DEFAULT_KAFKA_VERSION`, not both Kafka clients that :mod:`.cluster` imports.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Each public name and the module that defines it.
_HOMES = {
    "DEFAULT_KAFKA_VERSION": ".version",
    "BrokerFetchError": ".distribution",
    "cache_root": ".distribution",
    "fetch_kafka": ".distribution",
    "KafkaBroker": ".node",
    "KafkaCluster": ".cluster",
}

__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "BrokerFetchError",
    "KafkaBroker",
    "KafkaCluster",
    "cache_root",
    "fetch_kafka",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name], __name__), name)
