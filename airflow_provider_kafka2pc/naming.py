"""Transactional ids: validated, built, parsed and matched in one place.

Every pooled id is ``<prefix>-<slot>`` (Flink's ``TransactionalIdFactory`` keeps its
scheme in one class the same way). A prefix belongs to one export; the ledger's pool
hands out the slots.
"""

from __future__ import annotations

import hashlib
import re

from .errors import ConfigurationError

#: Kafka accepts any non-empty string; we narrow it to what survives shells, file names,
#: SQL and log lines without quoting, and keep it short enough to prefix-filter.
MAX_TRANSACTIONAL_ID_LENGTH = 200
#: Leaves room for "-<slot>" within :data:`MAX_TRANSACTIONAL_ID_LENGTH`.
MAX_PREFIX_LENGTH = 190
#: A derived prefix stays well inside :data:`MAX_PREFIX_LENGTH`.
MAX_DEFAULT_PREFIX_LENGTH = 150
DELIMITER = "-"
_VALID = re.compile(rf"[A-Za-z0-9._:\-]{{1,{MAX_TRANSACTIONAL_ID_LENGTH}}}")


def validate_transactional_id(value: object, field: str = "transactional_id") -> str:
    """Return ``value`` if it is a usable transactional id, else raise naming the field."""
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{field} must be a non-empty string, got {value!r}")
    if not _VALID.fullmatch(value):
        raise ConfigurationError(
            f"{field} {value!r} is invalid: use 1-{MAX_TRANSACTIONAL_ID_LENGTH} characters "
            "from A-Z a-z 0-9 . _ : -"
        )
    return value


def validate_prefix(id_prefix: object) -> str:
    """Return ``id_prefix`` if pooled ids can be built under it, else raise."""
    prefix = validate_transactional_id(id_prefix, "id_prefix")
    if len(prefix) > MAX_PREFIX_LENGTH:
        raise ConfigurationError(
            f"id_prefix is longer than {MAX_PREFIX_LENGTH} characters (ids append -<slot>)"
        )
    return prefix


def check_slots(id_prefix: str, slots: int) -> None:
    """Refuse a prefix under which the ``slots``-th id would be invalid (before any lease)."""
    validate_transactional_id(build(id_prefix, slots - 1), "id_prefix")


def build(id_prefix: str, slot: int) -> str:
    """The pooled transactional id of ``slot`` under ``id_prefix``."""
    return f"{id_prefix}{DELIMITER}{slot}"


def starts(id_prefix: str) -> str:
    """What every pooled id under ``id_prefix`` starts with (a prefix filter)."""
    return f"{id_prefix}{DELIMITER}"


def prefix_of(transactional_id: str) -> str:
    """The prefix a pooled id was built under."""
    return transactional_id.rsplit(DELIMITER, 1)[0]


def pattern(id_prefix: str) -> re.Pattern[str]:
    """What the pool hands out under ``id_prefix``, to full-match: ``<prefix>-<slot>``.

    Stricter than "starts with": prefix ``a`` must not claim ``a-eu-0`` or ``ab-0``.
    """
    return re.compile(re.escape(id_prefix) + re.escape(DELIMITER) + r"\d+")


def java_prefix_pattern(prefix: str) -> str:
    """A Java regex for the broker (ListTransactions v2 full-matches it): the prefix
    quoted, then anything."""
    if "\\E" in prefix:
        raise ConfigurationError(f"transactional id prefix {prefix!r} contains \\E")
    return f"\\Q{prefix}\\E.*"


def default_prefix(export_id: str) -> str:
    """A prefix derived from the export id: valid, bounded, stable."""
    prefix = re.sub(r"[^A-Za-z0-9._:]+", DELIMITER, export_id).strip(DELIMITER) or "export"
    if len(prefix) > MAX_DEFAULT_PREFIX_LENGTH:
        digest = hashlib.sha256(export_id.encode()).hexdigest()[:10]
        prefix = f"{prefix[: MAX_DEFAULT_PREFIX_LENGTH - 11]}.{digest}"
    return prefix
