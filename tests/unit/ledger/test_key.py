"""The batch key: shown as ``export/run key`` and parsed back, though run keys hold slashes."""

from __future__ import annotations

import pytest

from airflow_provider_kafka2pc.ledger import BatchKey

INTERVAL = "2026-11-20T00:00:00+00:00/2026-11-21T00:00:00+00:00"


def test_a_key_is_shown_as_export_slash_run_key_and_parsed_back_at_the_first_slash():
    key = BatchKey("orders_export.export_orders", INTERVAL)
    assert str(key) == f"orders_export.export_orders/{INTERVAL}"
    assert BatchKey.parse(str(key)) == key


@pytest.mark.parametrize("text", ["", "export", "export/", "/run"])
def test_text_without_both_halves_is_not_a_key(text):
    with pytest.raises(ValueError, match="is not a batch key"):
        BatchKey.parse(text)


def test_the_prepare_job_of_an_attempt_is_labelled_by_its_key():
    assert BatchKey("e", "r").job_label(2, "-repair") == "e/r#2-repair"
