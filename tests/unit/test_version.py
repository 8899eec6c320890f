"""One version everywhere: ``__version__``, the built metadata, the provider info, the changelog.

``airflow_provider_kafka2pc.__version__`` is the one place it is written; these tests catch a
second copy creeping back, and a release whose changelog heading was not updated with it.
"""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

import pytest
from packaging.version import Version
from setuptools.config.pyprojecttoml import read_configuration

from airflow_provider_kafka2pc import __version__
from airflow_provider_kafka2pc.get_provider_info import get_provider_info

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "airflow-provider-kafka2pc"

#: A release heading of CHANGELOG.md: ``## 0.2.0`` or ``## 0.2.0 (unreleased)``.
HEADING = re.compile(r"^## (?P<version>\d+\.\d+\.\d+)(?P<unreleased> \(unreleased\))?\s*$")


def top_changelog_heading() -> tuple[str, bool]:
    """The newest release heading: its version, and whether it is marked unreleased."""
    for line in (ROOT / "CHANGELOG.md").read_text().splitlines():
        if found := HEADING.match(line):
            return found["version"], found["unreleased"] is not None
    raise AssertionError("CHANGELOG.md has no '## X.Y.Z' heading")


def test_the_version_is_a_valid_release_or_development_version():
    version = Version(__version__)
    assert str(version) == __version__  # normalised: what pip and the wheel name show


def test_the_built_metadata_reads_the_package_version():
    project = read_configuration(ROOT / "pyproject.toml")["project"]
    assert project["version"] == __version__


def test_the_provider_info_lists_the_package_version_first():
    assert get_provider_info()["versions"][0] == __version__


def test_the_changelog_top_heading_is_this_version():
    heading, unreleased = top_changelog_heading()
    version = Version(__version__)
    assert version.base_version == heading
    # Unreleased: a development version (never the release's own number before the release);
    # released: exactly the heading's.
    assert version.is_devrelease == unreleased, (
        f"CHANGELOG.md's top heading is {heading!r}"
        f"{' (unreleased)' if unreleased else ''} but __version__ is {__version__!r}"
    )


def _installed_from_this_checkout() -> metadata.Distribution | None:
    """The venv's record of this checkout's editable install. Not ``metadata.distribution``:
    with the checkout on ``sys.path`` it finds the build's ``*.egg-info`` there first, which
    has no ``direct_url.json``, and the test below never ran."""
    for dist in metadata.distributions(name=DISTRIBUTION):
        origin = json.loads(dist.read_text("direct_url.json") or "{}")
        if origin.get("url") == ROOT.as_uri():
            return dist
    return None


def test_the_installed_metadata_is_this_version():
    dist = _installed_from_this_checkout()
    if dist is None:
        pytest.skip("the installed distribution is not this checkout's editable install")
    assert dist.version == __version__, "stale install: run `make .venv/.installed`"
