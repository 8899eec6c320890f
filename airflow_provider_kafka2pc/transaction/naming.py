"""Transactional ids: validated and built in one place, as Flink's naming strategy does."""

from __future__ import annotations

import re

from .errors import ConfigurationError

# Kafka accepts any non-empty string; we narrow it to what survives shells, file
# names, SQL and log lines without quoting, and keep it short enough to prefix-filter.
_VALID = re.compile(r"[A-Za-z0-9._:\-]{1,200}")


def validate_transactional_id(value: object, field: str = "transactional_id") -> str:
    """Return ``value`` if it is a usable transactional id, else raise naming the field."""
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{field} must be a non-empty string, got {value!r}")
    if not _VALID.fullmatch(value):
        raise ConfigurationError(
            f"{field} {value!r} is invalid: use 1-200 characters from A-Z a-z 0-9 . _ : -"
        )
    return value
