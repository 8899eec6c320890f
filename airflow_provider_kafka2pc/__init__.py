"""Exactly-once export from Spark into Apache Kafka by two-phase commit, run from Airflow."""

#: The one place the version is written: pyproject.toml reads it (``dynamic``), so do the
#: provider info and the docs; tests/unit/test_version.py holds CHANGELOG.md's top heading to
#: it. A ``.devN`` version while that heading says "(unreleased)", the bare version once released.
__version__ = "0.2.0.dev0"
