"""The default Apache Kafka release, alone in a module so that reading it (the CLI's help)
imports nothing else of the broker launcher."""

from __future__ import annotations

from typing import Final

#: The newest 4.x that passes the whole suite; docker-compose.yml pins the same.
DEFAULT_KAFKA_VERSION: Final = "4.4.0"
