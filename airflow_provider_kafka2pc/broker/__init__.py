"""Apache Kafka's own broker on loopback, fetched from Maven Central: the embedded default.

:func:`fetch_kafka` resolves ``org.apache.kafka:kafka_2.13`` with Apache Ivy (shipped
inside PySpark, run with the Java that Spark needs anyway) into a cache directory, once
per version; :class:`KafkaBroker` runs one KRaft node (broker and controller in one JVM)
from those jars, :class:`KafkaCluster` three or more replicated ones. Used by
``kafka2pc broker``, the demo, the tests and the benchmarks.
"""

from __future__ import annotations

from .cluster import KafkaCluster
from .distribution import DEFAULT_KAFKA_VERSION, BrokerFetchError, cache_root, fetch_kafka
from .node import KafkaBroker

__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "BrokerFetchError",
    "KafkaBroker",
    "KafkaCluster",
    "cache_root",
    "fetch_kafka",
]
