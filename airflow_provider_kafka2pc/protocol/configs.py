"""DescribeConfigs of topics: each setting's effective value and where it comes from. Pure.

A topic's answer holds the value in force for every topic setting: the topic's own where it
sets one, else the broker's (``log.retention.ms`` answers as the topic's ``retention.ms``),
with its source (:class:`ConfigSource`), so a check can tell "set on the topic" from "the
broker's default" and say which one to change.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin.configs import DescribeConfigsRequest

from ..errors import ProtocolError
from .codes import error_name

#: DescribeConfigs' resource type of a topic (Kafka's ``ConfigResource.Type.TOPIC``).
RESOURCE_TOPIC = 2


class ConfigSource(enum.IntEnum):
    """Where a setting's value comes from (Kafka's ``DescribeConfigsResponse.ConfigSource``)."""

    UNKNOWN = 0
    TOPIC = 1
    DYNAMIC_BROKER = 2
    DYNAMIC_DEFAULT_BROKER = 3
    STATIC_BROKER = 4
    DEFAULT = 5
    DYNAMIC_BROKER_LOGGER = 6
    CLIENT_METRICS = 7
    GROUP = 8

    @classmethod
    def parse(cls, code: int) -> ConfigSource:
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN

    @property
    def described(self) -> str:
        """For error texts: who set the value, so the reader knows what to change."""
        return _DESCRIBED.get(self, "of unknown origin")


_DESCRIBED = {
    ConfigSource.TOPIC: "set on the topic",
    ConfigSource.DYNAMIC_BROKER: "the broker's dynamic setting",
    ConfigSource.DYNAMIC_DEFAULT_BROKER: "the cluster's dynamic default",
    ConfigSource.STATIC_BROKER: "the broker's server.properties",
    ConfigSource.DEFAULT: "Kafka's default",
}


@dataclass(frozen=True)
class ConfigEntry:
    """One setting of one topic as the broker applies it."""

    name: str
    #: None for a sensitive setting or one without a value.
    value: str | None
    source: ConfigSource = ConfigSource.UNKNOWN


def describe_topic_configs_request(
    topics: Sequence[str], names: Sequence[str] | None, version: int
) -> DescribeConfigsRequest:
    """Ask for ``names`` of each topic (every setting when None); v1+ says each value's source."""
    resource = DescribeConfigsRequest.DescribeConfigsResource
    return DescribeConfigsRequest(
        resources=[
            resource(
                resource_type=RESOURCE_TOPIC,
                resource_name=topic,
                configuration_keys=list(names) if names is not None else None,
            )
            for topic in topics
        ],
        include_synonyms=False,
        include_documentation=False,
        version=version,
    )


def parse_topic_configs(answer: Any) -> dict[str, dict[str, ConfigEntry]]:
    """Topic -> setting name -> entry; ProtocolError naming the first topic refused
    (UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED, ...)."""
    found: dict[str, dict[str, ConfigEntry]] = {}
    for result in answer.results:
        if result.error_code:
            name = error_name(result.error_code)
            detail = f" ({result.error_message})" if result.error_message else ""
            raise ProtocolError(
                f"DescribeConfigs of topic {result.resource_name!r}: {name}{detail}", name
            )
        found[result.resource_name] = {
            c.name: ConfigEntry(c.name, c.value, ConfigSource.parse(c.config_source))
            for c in result.configs
        }
    return found
