"""The option matrix in the docs is the one the prepare's plan gives today, and every test it
cites as a proof exists (devtools/matrix.py)."""

from __future__ import annotations

from devtools.matrix import ROOT, missing_tests, render


def test_the_docs_matrix_is_the_plans():
    assert (ROOT / "docs" / "matrix.md").read_text() == render(), (
        "the option matrix changed: run `python -m devtools.matrix > docs/matrix.md`"
    )


def test_every_proof_names_a_test_that_exists():
    assert missing_tests() == []
