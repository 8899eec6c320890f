"""The topic's asset, declared when a DAG file is parsed without reading the connection.

The topic's asset is the official Kafka provider's ``create_asset(server=..., topic=...)``,
``kafka://<first bootstrap server>/<topic>``: its URI needs the Kafka connection. Airflow
parses DAG files often, in processes that should read no connection (with a secrets
backend every read is a call), so the commit task's outlet is an :class:`AssetAlias` named
from the connection id and the topic alone; when the commit succeeds it attaches the
concrete asset, built from the connection then, to the alias's event. DAGs scheduled on
``create_asset(server=..., topic=...)`` run on that event as on a plain outlet's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow.providers.apache.kafka.assets.kafka import create_asset
from airflow.sdk import Asset, AssetAlias

#: Alias names are ``kafka2pc:<kafka connection id>:<topic>``.
_ALIAS_PREFIX = "kafka2pc"


def topic_alias(topic: str, kafka_conn_id: str) -> AssetAlias:
    """The alias the commit task emits the topic's asset through; built from names only."""
    return AssetAlias(name=f"{_ALIAS_PREFIX}:{kafka_conn_id}:{topic}")


def topic_asset(server: str, topic: str) -> Asset:
    """The topic's asset as the official Kafka provider builds it."""
    return create_asset(server=server, topic=topic)


def emit_committed(
    outlet_events: Any,
    outlets: Iterable[Any],
    *,
    kafka_conn_id: str,
    topics: Mapping[str, int],
    server: str,
    extra: Mapping[str, Any],
) -> list[Asset]:
    """Attach ``extra`` to the commit's asset events: on each plain :class:`Asset` outlet,
    and through this export's :func:`topic_alias` of each of ``topics`` (name: records
    committed to it, in the event's ``committed``) as that topic's asset (other aliases are
    the user's business). Returns the assets the events are for."""
    emitted: list[Asset] = []
    aliases = {topic_alias(t, kafka_conn_id).name: t for t in topics}
    for outlet in outlets:
        if isinstance(outlet, Asset):
            outlet_events[outlet].extra = dict(extra)
            emitted.append(outlet)
        elif isinstance(outlet, AssetAlias) and outlet.name in aliases:
            topic = aliases[outlet.name]
            asset = topic_asset(server, topic)
            per_topic = {**extra, "committed": topics[topic]} if len(topics) > 1 else extra
            outlet_events[outlet].add(asset, extra=dict(per_topic))
            emitted.append(asset)
    return emitted
