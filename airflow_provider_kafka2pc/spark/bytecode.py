"""The driver imports pyspark and py4j from their installed packages, not from spark-submit's zips.

Why: spark-submit puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's source zip first
on the Python driver's path. A zip holds no bytecode, so every launch compiles the modules
it imports from source: importing ``pyspark.sql`` took 0.54 s from the zip and 0.12 s from
the installed package here (docs/performance-startup.md). Where Spark is pip's pyspark (the
package's directory is ``SPARK_HOME``, as in the embedded default and wherever Airflow's
spark-submit comes from PyPI), the zips are copies of packages already installed beside
it: the same version, with their ``__pycache__``. Only then are the zips moved behind the
installed copies; a Spark distribution's zips (YARN, Kubernetes images) stay first.

Imported and run by the spark-submit application before anything imports pyspark; stdlib
only, so it costs nothing itself.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

#: The zip on spark-submit's path, and the module whose bytes prove two copies one version.
_ZIPPED = {"pyspark": "pyspark/version.py", "py4j": "py4j/version.py"}


def _zipped_package(entry: str) -> str | None:
    name = Path(entry).name
    if name == "pyspark.zip":
        return "pyspark"
    if name.startswith("py4j-") and name.endswith("-src.zip"):
        return "py4j"
    return None


def _installed_copy(package: str, zipped: str, path: list[str]) -> bool:
    """Whether a directory on ``path`` holds ``package`` with the zip's very version file."""
    member = _ZIPPED[package]
    try:
        with zipfile.ZipFile(zipped) as archive:
            in_zip = archive.read(member)
    except (OSError, KeyError, zipfile.BadZipFile):
        return False
    for entry in path:
        candidate = Path(entry or ".") / member
        try:
            if candidate.read_bytes() == in_zip:
                return True
        except OSError:
            continue
    return False


def prefer_installed_packages(path: list[str] | None = None) -> list[str]:
    """Move spark-submit's pyspark and py4j zips behind identical installed copies.

    Returns the entries moved (none when pyspark is already imported, when there is no
    zip, or when no installed copy is the zip's version). ``path``: ``sys.path``.
    """
    path = sys.path if path is None else path
    if path is sys.path and "pyspark" in sys.modules:
        return []
    dirs = [entry for entry in path if _zipped_package(entry) is None]
    moved = []
    for entry in list(path):
        package = _zipped_package(entry)
        if package is not None and _installed_copy(package, entry, dirs):
            path.remove(entry)
            path.append(entry)
            moved.append(entry)
    return moved
