"""The user documentation: every module the provider info lists is in the API reference, and
no page points at the project's internal issue numbers (a reader cannot open them: the page
says the thing itself)."""

from __future__ import annotations

import re
from pathlib import Path

from airflow_provider_kafka2pc.get_provider_info import get_provider_info

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: What users read: the site's pages, the README and the changelog (included by the site).
USER_DOCS = (*sorted(DOCS.glob("*.md")), ROOT / "README.md", ROOT / "CHANGELOG.md")

#: "issue 27", "Issue #3", "issues 29 and 30", or a bare "#12" / "(#12)". Not "it issues 3
#: requests" (a plural needs a second number), not "pytest-xdist#1386" nor "PKCS#8" (another
#: project's reference, a name: a word character before the "#").
INTERNAL_ISSUE = re.compile(
    r"\bissue #?\d+|\bissues #?\d+(?:\s*(?:,|and)\s*#?\d+)+|(?:^|[\s(\[])#\d+\b",
    re.IGNORECASE,
)


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


def internal_issue_references(text: str) -> list[str]:
    return [m.group().strip() for m in INTERNAL_ISSUE.finditer(text)]


def test_the_pattern_finds_internal_issue_numbers_and_nothing_else():
    found = internal_issue_references(
        "as issue 27 asks; Issue #3; issues 29 and 30; fixed (#12); see #4.\n#5 first"
    )
    assert found == ["issue 27", "Issue #3", "issues 29 and 30", "(#12", "#4", "#5"]
    assert not internal_issue_references(
        "the writer issues 3 requests; pytest-xdist#1386; PKCS#8; <run>/...#1: partition 0;"
        " the issuer; issued by CN=x"
    )


def test_no_user_doc_names_an_internal_issue_number():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {ref}"
        for path in USER_DOCS
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for ref in internal_issue_references(line)
    ]
    assert found == [], "say what the issue asked for instead of its number"
