"""Source splits without Spark: the ledger's record read back, what a changed input is
refused with, and how the record reaches the repair application's command line."""

from __future__ import annotations

import json

import pytest

from airflow_provider_kafka2pc.errors import ConfigurationError, SourceChangedError
from airflow_provider_kafka2pc.ledger import ParticipantState as P
from airflow_provider_kafka2pc.spark.app import parse_args
from airflow_provider_kafka2pc.spark.export_spec import from_arguments
from airflow_provider_kafka2pc.spark.job import repair_arguments
from airflow_provider_kafka2pc.spark.partitionings import check_partitioning
from airflow_provider_kafka2pc.spark.source_splits import SourceSplits, check_unchanged
from airflow_provider_kafka2pc.transaction.manifest import SOURCE

from ..builders import participants

RECORD = SourceSplits(
    settings={"spark.sql.files.minPartitionNum": "3", "spark.sql.files.openCostInBytes": None},
    splits=4,
    partitions=3,
    fingerprint="f" * 64,
    layout="a" * 64,
)


def test_the_record_round_trips_through_json():
    assert SourceSplits.from_dict(json.loads(json.dumps(RECORD.to_dict()))) == RECORD


@pytest.mark.parametrize(
    "broken",
    [{}, {**RECORD.to_dict(), "splits": "many"}, {**RECORD.to_dict(), "settings": {"x": "1"}}],
)
def test_a_malformed_record_is_refused_naming_the_repair(broken):
    with pytest.raises(ConfigurationError, match="the repair cannot recompute"):
        SourceSplits.from_dict(broken)


def test_same_files_and_layout_pass():
    check_unchanged(RECORD, RECORD)


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        ({"fingerprint": "0" * 64}, "the input files"),
        ({"layout": "0" * 64, "splits": 5}, "the split layout (5 splits in 3 partitions now, 4"),
    ],
)
def test_other_files_or_layout_are_refused(changed, named):
    now = SourceSplits(**{**RECORD.to_dict(), **changed})
    with pytest.raises(SourceChangedError, match="the source changed") as refused:
        check_unchanged(now, RECORD)
    assert named in str(refused.value)


def test_the_repair_hands_the_record_to_the_application():
    parts = participants(P.COMMITTED, P.LOST, P.COMMITTED)
    args = repair_arguments(parts, parts[1:2], SOURCE, RECORD.to_dict())
    base = ["--source-path", "/data", "--topic", "t", "--transactional-ids", "a,b,c"]
    parsed = parse_args([*base, "--manifest", "/m.json", *args])
    assert parsed.only_partitions == [1] and parsed.recorded_partitioning == SOURCE
    assert SourceSplits.from_dict(parsed.source_splits) == RECORD
    assert from_arguments(parsed).partitioning == "auto"  # the repair follows the record
    assert repair_arguments(parts, parts[1:2], "hash")[-2:] == ["--partitioning", "hash"]


def test_no_shuffle_is_an_option_of_the_application():
    base = ["--source-path", "/d", "--topic", "t", "--transactional-ids", "a", "--manifest", "m"]

    def asked(*extra: str) -> str:
        return from_arguments(parse_args([*base, *extra])).partitioning

    assert asked() == "auto"
    assert asked("--no-shuffle") == asked("--partition-by", SOURCE) == SOURCE
    assert asked("--shuffle") == "kafka-aligned"  # the shuffle of earlier releases
    assert asked("--shuffle", "--no-align-with-kafka") == asked("--partition-by", "hash") == "hash"


def test_the_partitionings_a_prepare_may_be_asked_for():
    for asked in ("auto", "source-splits", "kafka-aligned", "hash", None):
        assert check_partitioning(asked) == asked
    with pytest.raises(ConfigurationError, match="partitioning must be one of"):
        check_partitioning("shuffle")
    with pytest.raises(ConfigurationError, match="contradicts align_with_kafka=False"):
        check_partitioning("kafka-aligned", align_with_kafka=False)
