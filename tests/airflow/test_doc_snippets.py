"""The DAG the README and docs/operators.md show is a real one: it parses and has the shape
they describe, so the snippet cannot rot.

Its one source is ``docs/snippets/export_dag.py``: the documentation site includes it
(``{literalinclude}`` in docs/operators.md); GitHub renders README.md as it is, so the
README's copy must equal the file. The DagBag parses that file without any connection.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SNIPPETS = REPO / "docs" / "snippets"
EXPORT_DAG = SNIPPETS / "export_dag.py"
GROUP = "export"


def python_blocks(markdown: str) -> list[str]:
    """The bodies of the fenced ``python`` blocks of a Markdown page."""
    return re.findall(r"^```python\n(.*?)^```$", markdown, flags=re.MULTILINE | re.DOTALL)


def test_the_readme_shows_the_tested_dag_verbatim() -> None:
    blocks = python_blocks((REPO / "README.md").read_text())
    assert EXPORT_DAG.read_text() in blocks, "README.md's DAG differs from docs/snippets/"


def test_the_operators_page_includes_the_tested_dag() -> None:
    page = (REPO / "docs" / "operators.md").read_text()
    assert "```{literalinclude} snippets/export_dag.py\n" in page
    assert python_blocks(page) == []  # no untested copy beside it


def test_every_python_block_of_the_docs_is_python() -> None:
    """The other blocks are fragments, not DAGs; they must at least parse."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    blocks = [(page, block) for page in pages for block in python_blocks(page.read_text())]
    assert len(blocks) >= 5  # the README's and the wire formats' and Spark Connect's
    for page, block in blocks:
        ast.parse(block, filename=str(page))


@pytest.fixture(scope="module")
def dag() -> Any:
    from tests.airflow.dagtest import dagbag_module

    with pytest.MonkeyPatch.context() as env:  # parsing needs no connection
        for name in ("AIRFLOW_CONN_KAFKA_DEFAULT", "AIRFLOW_CONN_SPARK_DEFAULT"):
            env.delenv(name, raising=False)
        bag = dagbag_module().DagBag(dag_folder=str(EXPORT_DAG))
    assert bag.import_errors == {}
    assert bag.dag_ids == ["orders_export"]
    return bag.dags["orders_export"]


def test_the_snippet_is_the_export_task_group_it_describes(dag: Any) -> None:
    tasks = {t.task_id.removeprefix(f"{GROUP}."): t for t in dag.tasks}
    assert set(tasks) == {"recover", "prepare", "decide", "commit", "abort"}
    assert tasks["recover"].downstream_task_ids == {f"{GROUP}.prepare"}
    assert tasks["prepare"].downstream_task_ids == {f"{GROUP}.decide"}
    assert tasks["decide"].downstream_task_ids == {f"{GROUP}.commit", f"{GROUP}.abort"}
    prepare = tasks["prepare"]
    assert (prepare.topic, prepare.key_column, prepare.num_partitions) == ("orders", "order_id", 8)
    assert prepare.writer == "auto"
    assert dag.catchup is True
