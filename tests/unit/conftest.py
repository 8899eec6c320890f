"""The unit tier: the pure rules, run in seconds, with no broker, no Spark and no Airflow.

``tests/conftest.py`` is loaded above this one, but it starts its brokers only through
fixtures (``broker_pool`` and the fixtures built on it), so a unit test that asks for none
of them starts none. Two guards keep it so:

* collection refuses a unit test that uses a fixture defined anywhere in ``tests/``
  outside ``tests/unit/`` (the brokers, the ledger, the Airflow database);
* a session that ran only unit tests fails if anything imported ``airflow``.

Every test here is marked ``unit`` (``pytest -m unit``); ``pytest tests/unit`` selects the
same tests by path.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

UNIT_DIR = Path(__file__).resolve().parent
TESTS_DIR = UNIT_DIR.parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "unit: the fast tier (tests/unit): no broker, no Spark, no Airflow"
    )


def _in(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _is_unit(item: pytest.Item) -> bool:
    return _in(Path(str(item.path)).resolve(), UNIT_DIR)


def _foreign_fixtures(item: pytest.Item) -> list[str]:
    """Fixtures this unit test uses that are defined in the integration tier."""
    info = getattr(item, "_fixtureinfo", None)
    foreign = []
    for name, defs in getattr(info, "name2fixturedefs", {}).items():
        for fixturedef in defs:
            code = getattr(fixturedef.func, "__code__", None)
            if code is None:
                continue
            where = Path(code.co_filename).resolve()
            if _in(where, TESTS_DIR) and not _in(where, UNIT_DIR):
                foreign.append(f"{name} ({where.relative_to(TESTS_DIR.parent)})")
    return foreign


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    refused = []
    for item in items:
        if not _is_unit(item):
            continue
        item.add_marker(pytest.mark.unit)
        refused += [f"{item.nodeid}: {f}" for f in _foreign_fixtures(item)]
    if refused:
        raise pytest.UsageError(
            "the unit tier may not use the integration tier's fixtures:\n  " + "\n  ".join(refused)
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    items = getattr(session, "items", [])
    if items and all(_is_unit(item) for item in items) and "airflow" in sys.modules:
        writer = session.config.get_terminal_writer()
        writer.line()
        writer.line("unit tier: something imported airflow; the unit tier must not", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
