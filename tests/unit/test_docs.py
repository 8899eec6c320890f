"""The user documentation: every module the provider info lists is in the API reference."""

from __future__ import annotations

import re
from pathlib import Path

from airflow_provider_kafka2pc.get_provider_info import get_provider_info

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def test_the_api_reference_documents_every_module_the_provider_info_lists():
    info = get_provider_info()
    listed = {
        module
        for kind in ("hooks", "operators", "sensors", "triggers")
        for entry in info[kind]
        for module in entry["python-modules"]
    }
    documented = set(re.findall(r"^\.\. automodule:: (\S+)$", (DOCS / "api.md").read_text(), re.M))
    assert sorted(listed - documented) == []
