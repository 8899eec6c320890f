"""Sphinx configuration of the provider's documentation (``make docs``).

Markdown pages through MyST (the pages were Markdown before there was a site); the
configuration reference is generated from ``get_provider_info()["config"]`` by
``_ext/provider_config.py``, so it cannot drift from what Airflow reads; the API reference
(``api.md``) by ``sphinx.ext.autodoc`` from the docstrings, in ``eval-rst`` blocks since the
docstrings are reStructuredText.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))
# autodoc imports the operators, so Airflow: its home (it creates logs/ there) inside the
# build directory, not ~/airflow, unless the caller chose one.
os.environ.setdefault("AIRFLOW_HOME", str(Path(__file__).parent / "_build" / "airflow-home"))

from airflow_provider_kafka2pc import __version__

project = "airflow-provider-kafka2pc"
author = "kafka2pc developers"
release = __version__
extensions = ["myst_parser", "provider_config", "sphinx.ext.autodoc"]
# The API reference (api.md): members in the order the modules define them; the type hints
# beside each parameter's description rather than in a signature many lines long.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
myst_heading_anchors = 4
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "images/*.md"]
html_theme = "alabaster"
html_static_path: list[str] = []
# Cross-references to files of the repository (tests, benchmarks) are plain text here.
suppress_warnings = ["myst.xref_missing"]
