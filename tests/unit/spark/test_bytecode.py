"""spark/bytecode.py: spark-submit's zips move behind identical installed copies only."""

from __future__ import annotations

import zipfile
from pathlib import Path

from airflow_provider_kafka2pc.spark.bytecode import prefer_installed_packages


def _zip(path: Path, member: str, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member, text)
    return str(path)


def _installed(site: Path, member: str, text: str) -> str:
    (site / member).parent.mkdir(parents=True, exist_ok=True)
    (site / member).write_text(text)
    return str(site)


def test_zips_move_behind_the_same_installed_versions(tmp_path: Path) -> None:
    lib = tmp_path / "site" / "pyspark" / "python" / "lib"
    pyspark_zip = _zip(lib / "pyspark.zip", "pyspark/version.py", "__version__ = '4.3.0'\n")
    py4j_zip = _zip(lib / "py4j-0.10.9.9-src.zip", "py4j/version.py", "__version__ = '0.10.9.9'\n")
    site = _installed(tmp_path / "site", "pyspark/version.py", "__version__ = '4.3.0'\n")
    _installed(tmp_path / "site", "py4j/version.py", "__version__ = '0.10.9.9'\n")
    path = ["/app", pyspark_zip, py4j_zip, "/usr/lib/python3.11", site]

    moved = prefer_installed_packages(path)

    assert moved == [pyspark_zip, py4j_zip]
    assert path == ["/app", "/usr/lib/python3.11", site, pyspark_zip, py4j_zip]


def test_a_distributions_zips_stay_first(tmp_path: Path) -> None:
    """Another version installed (or none): the zip is Spark's own and stays first."""
    pyspark_zip = _zip(tmp_path / "spark" / "pyspark.zip", "pyspark/version.py", "v = '4.3.0'\n")
    py4j_zip = _zip(tmp_path / "spark" / "py4j-0.10.9.9-src.zip", "py4j/version.py", "v = 1\n")
    site = _installed(tmp_path / "site", "pyspark/version.py", "v = '4.2.0'\n")
    path = [pyspark_zip, py4j_zip, site]

    assert prefer_installed_packages(path) == []
    assert path == [pyspark_zip, py4j_zip, site]


def test_an_unreadable_zip_stays(tmp_path: Path) -> None:
    broken = tmp_path / "pyspark.zip"
    broken.write_text("not a zip")
    path = [str(broken), str(tmp_path)]
    assert prefer_installed_packages(path) == []
