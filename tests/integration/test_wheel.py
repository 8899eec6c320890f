"""The built distribution holds what users run, and nothing that only developers need.

``python -m build`` makes the sdist, then the wheel from that sdist (as a release would), in
a temporary directory; ``twine check --strict`` reads both. The wheel's file list must hold
the provider (its jar, migrations, page templates, ``get_provider_info`` and the entry
points) and none of the checkout's developer rooms (``devtools/``: the local broker and
cluster, the demo, test helpers; ``tests/``, ``benchmarks/``, ``dags/``, ``scripts/``).
Then the wheel alone, installed into an empty directory, imports every module it ships
and serves the provider info: no module needs a file the wheel left out.

A test rather than a CI step: ``make test`` runs it on every machine, with pytest's report.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.jvm_test_jar import not_product_classes

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "airflow_provider_kafka2pc"

#: Top-level rooms of the checkout that must never be in the wheel.
CHECKOUT_ONLY = ("tests/", "devtools/", "benchmarks/", "dags/", "scripts/", "docs/", "jvm/")
#: Modules that moved to devtools/ (issue 31): a stale build directory would bring them back.
MOVED_OUT = (
    f"{PACKAGE}/broker/",
    f"{PACKAGE}/demo.py",
    f"{PACKAGE}/spark/submit.py",
    f"{PACKAGE}/transaction/visible.py",
)
#: Data files the provider reads at run time.
REQUIRED = (
    f"{PACKAGE}/get_provider_info.py",
    f"{PACKAGE}/spark/app.py",
    f"{PACKAGE}/spark/jars/kafka2pc-spark.jar",
    f"{PACKAGE}/ledger/migrations/env.py",
    f"{PACKAGE}/ledger/migrations/versions/0001_initial.py",
)


def run(*command: str | Path, **kwargs) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, timeout=600, **kwargs
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel built from it. No build isolation: the test extra pins the
    build backend (setuptools), so the build needs no download."""
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, REPO)
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    (found,) = dist.glob("*.whl")
    return found


@pytest.fixture(scope="module")
def names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_twine_accepts_the_sdist_and_the_wheel(dist: Path) -> None:
    files = sorted(dist.iterdir())
    assert sorted(f.suffix for f in files) == [".gz", ".whl"]
    done = run(sys.executable, "-m", "twine", "check", "--strict", *files)
    assert done.stdout.count("PASSED") == 2, done.stdout


def test_the_distributions_carry_the_package_version(dist: Path, wheel: Path) -> None:
    from airflow_provider_kafka2pc import __version__

    # pyproject.toml reads __version__ (tests/unit/test_version.py): the built files carry it.
    assert wheel.name.startswith(f"airflow_provider_kafka2pc-{__version__}-")
    assert (dist / f"airflow_provider_kafka2pc-{__version__}.tar.gz").is_file()
    with zipfile.ZipFile(wheel) as archive:
        (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        assert f"\nVersion: {__version__}\n" in archive.read(meta).decode()


def test_the_wheel_holds_no_developer_tools(names: list[str]) -> None:
    shipped = [n for n in names if n.startswith((*CHECKOUT_ONLY, *MOVED_OUT))]
    assert shipped == []
    # Only the provider's package and its metadata, nothing beside them.
    assert {n.split("/")[0] for n in names} == {
        PACKAGE,
        next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")),
    }


def test_the_wheel_holds_the_provider_and_its_data(names: list[str]) -> None:
    assert [f for f in REQUIRED if f not in names] == []
    templates = [n for n in names if n.startswith(f"{PACKAGE}/plugins/templates/")]
    assert templates and all(n.endswith(".html") for n in templates)
    migrations = [n for n in names if n.startswith(f"{PACKAGE}/ledger/migrations/versions/0")]
    assert len(migrations) >= 4


def test_the_wheels_jar_holds_no_test_classes(wheel: Path) -> None:
    """The jar users get is the product: no fault hook, no harness (the tests' own jar
    holds them), every class from a jvm/src source."""
    with zipfile.ZipFile(wheel) as archive:
        shipped = archive.read(f"{PACKAGE}/spark/jars/kafka2pc-spark.jar")
    with zipfile.ZipFile(io.BytesIO(shipped)) as jar:
        names = jar.namelist()
    assert "kafka2pc/spark/JvmWriter.class" in names
    assert not_product_classes(names) == []
    assert [n for n in names if "Fault" in n or "Harness" in n] == []


def test_the_wheel_declares_the_provider_and_the_user_command(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (entry_points,) = [n for n in archive.namelist() if n.endswith("entry_points.txt")]
        text = archive.read(entry_points).decode()
    assert f"provider_info = {PACKAGE}.get_provider_info:get_provider_info" in text
    assert f"kafka2pc = {PACKAGE}.cli:main" in text
    assert f"kafka2pc = {PACKAGE}.plugins.kafka_exports:KafkaExportsPlugin" in text


#: Run against the installed wheel alone: every module it ships imports (Alembic's scripts
#: aside: they run inside a migration, which is run here instead, on a fresh SQLite ledger),
#: and the provider info and the project's jar are in that installation.
PROBE = f"""
import importlib, json, pkgutil, sys
from pathlib import Path
import {PACKAGE} as package
home = Path(package.__file__).parent
assert home.parent == Path(sys.argv[1]), home
migrations = "{PACKAGE}.ledger.migrations"
modules = sorted(m.name for m in pkgutil.walk_packages(package.__path__, "{PACKAGE}."))
for name in modules:
    if not name.startswith(migrations + "."):
        importlib.import_module(name)
from {PACKAGE}.get_provider_info import get_provider_info
from {PACKAGE}.ledger import Ledger, database
from {PACKAGE}.spark import PROJECT_JAR
with Ledger("sqlite:///" + sys.argv[2]) as ledger:
    revision = database.schema_revision(ledger._engine)
print(json.dumps({{
    "modules": modules,
    "package": info["package-name"] if (info := get_provider_info()) else None,
    "jar": Path(PROJECT_JAR).is_file() and Path(PROJECT_JAR).is_relative_to(home),
    "ledger": revision,
    "revisions": database._revisions(),
    "devtools": "devtools" in sys.modules,
}}))
"""


def test_the_installed_wheel_alone_imports_every_module(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    run(sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", target, wheel)
    env = {**os.environ, "PYTHONPATH": str(target), "AIRFLOW_HOME": str(tmp_path / "airflow")}
    # cwd: not the checkout, so nothing is imported from there.
    done = run(sys.executable, "-c", PROBE, target, tmp_path / "ledger.db", cwd=tmp_path, env=env)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["package"] == "airflow-provider-kafka2pc"
    assert seen["jar"] is True
    # Migrated to the newest of the revisions the wheel ships, all of them.
    assert len(seen["revisions"]) >= 4 and seen["ledger"] == seen["revisions"][0]
    assert seen["devtools"] is False
    assert f"{PACKAGE}.cli" in seen["modules"] and f"{PACKAGE}.spark.maven" in seen["modules"]
