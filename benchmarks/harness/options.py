"""Command-line options every benchmark shares."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def add_subset_argument(
    parser: argparse.ArgumentParser,
    flag: str,
    choices: Sequence[str],
    default: Sequence[str] | None = None,
) -> None:
    """``flag``: a comma-separated subset of ``choices`` (``default``, else all of them,
    when not given); an unknown name is refused by :func:`parse_subset`."""
    chosen = list(choices if default is None else default)
    parser.add_argument(
        flag,
        type=lambda text: [s.strip() for s in text.split(",") if s.strip()],
        default=chosen,
        help=f"comma-separated subset of: {', '.join(choices)} (default: {', '.join(chosen)})",
    )


def parse_subset(
    parser: argparse.ArgumentParser, chosen: Sequence[str], choices: Sequence[str], flag: str
) -> list[str]:
    """``chosen`` as given; exits with a usage error on an unknown name."""
    unknown = sorted(set(chosen) - set(choices))
    if unknown:
        parser.error(f"{flag}: unknown {unknown}; choose from {list(choices)}")
    return list(chosen)


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (a count of rows, rounds, cores)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: give 1 or more")
    return value


def setting(text: str) -> tuple[str, str]:
    """An argparse type: ``KEY=VALUE`` as a pair. Refused text is not echoed: without "="
    there is no telling a key from a password (as ``kafka2pc commit --config`` refuses it)."""
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise argparse.ArgumentTypeError(
            "not KEY=VALUE (its text is not shown; it may be a secret)"
        )
    return key.strip(), value.strip()
