"""Sphinx configuration of the provider's documentation (``make docs``).

Markdown pages through MyST (the pages were Markdown before there was a site); the
configuration reference is generated from ``get_provider_info()["config"]`` by
``_ext/provider_config.py``, so it cannot drift from what Airflow reads.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

from airflow_provider_kafka2pc import __version__

project = "airflow-provider-kafka2pc"
author = "kafka2pc developers"
release = __version__
extensions = ["myst_parser", "provider_config"]
myst_heading_anchors = 4
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "images/*.md"]
html_theme = "alabaster"
html_static_path: list[str] = []
# Cross-references to files of the repository (tests, benchmarks) are plain text here.
suppress_warnings = ["myst.xref_missing"]
