"""The prepare's plan, as a table: which writer, and what is refused, from the facts found.

No Spark here: :func:`plan_prepare` gathers the facts; these pure functions decide."""

from __future__ import annotations

import pytest

from airflow_provider_kafka2pc.errors import BrokerFetchError, ConfigurationError
from airflow_provider_kafka2pc.spark.export_spec import ExportSpec
from airflow_provider_kafka2pc.spark.plan import (
    WriterChoice,
    WriterFacts,
    decide_writer,
    run_refusals,
)

LOADS = {"jvm_version": "4.4.0"}
NO_JAR = {"jvm_refused": ConfigurationError("kafka2pc.jar is not on the class path: --jars")}
NO_FETCH = {"jvm_refused": BrokerFetchError("kafka-clients 4.4.0 could not be fetched")}
BAD_SETTING = {"settings_refused": "no Java producer setting for 'socket.nagle.disable'"}

#: (asked, connect, facts) -> the choice (writer, the words of the reason, or None)
CHOICES = [
    ("auto", False, LOADS, ("jvm", None)),
    ("auto", True, LOADS, ("jvm", None)),
    ("jvm", False, LOADS, ("jvm", None)),
    ("python", False, LOADS, ("python", None)),
    ("auto", False, NO_JAR, ("python", "the JVM writer cannot load here: kafka2pc.jar")),
    ("auto", True, NO_JAR, ("python", "the JVM writer cannot load here: kafka2pc.jar")),
    ("auto", False, NO_FETCH, ("python", "the JVM writer cannot load here: kafka-clients")),
    ("auto", False, BAD_SETTING, ("python", "the Java producer cannot take these settings")),
    ("auto", False, {**LOADS, "on_batch": True}, ("python", "an on_batch hook runs in Python")),
]


@pytest.mark.parametrize(("asked", "connect", "facts", "chosen"), CHOICES)
def test_the_writer_chosen_and_why(asked, connect, facts, chosen):
    choice = decide_writer(asked, WriterFacts(connect=connect, **facts))
    writer, words = chosen
    assert choice.writer == writer
    if words is None:
        assert choice.reason is None
    else:
        assert words in (choice.reason or "")
    if writer == "jvm":
        assert choice == WriterChoice("jvm", None, "4.4.0")


#: an explicit jvm that cannot run here -> the error, by class and words
REFUSED = [
    (False, NO_JAR, ConfigurationError, "kafka2pc.jar is not on the class path"),
    (True, NO_JAR, ConfigurationError, "writer='jvm' on Spark Connect: kafka2pc.jar"),
    (False, NO_FETCH, BrokerFetchError, "could not be fetched"),  # not permanent: a retry
    (False, BAD_SETTING, ConfigurationError, "socket.nagle.disable"),
    (False, {**LOADS, "on_batch": True}, ConfigurationError, "writer='python' only"),
]


@pytest.mark.parametrize(("connect", "facts", "kind", "words"), REFUSED)
def test_an_explicit_jvm_writer_that_cannot_run_is_refused(connect, facts, kind, words):
    with pytest.raises(kind, match=words):
        decide_writer("jvm", WriterFacts(connect=connect, **facts))


@pytest.mark.parametrize(
    ("spec", "ids", "connect", "speculation", "refused"),
    [
        (ExportSpec(topic="t"), ["a-0", "a-1"], False, False, []),
        (ExportSpec(topic="t"), [], False, False, ["at least one id"]),
        (ExportSpec(topic="t"), ["a-0", "a-0"], False, False, ["distinct"]),
        (ExportSpec(topic="t", partitioning="source-splits"), ["a"], True, False, ["Connect"]),
        (ExportSpec(topic="t", partitioning="source-splits"), ["a"], False, False, []),
        (ExportSpec(topic="t"), ["a"], False, True, ["spark.speculation"]),
        (ExportSpec(topic="t"), [], True, True, ["at least one id", "spark.speculation"]),
    ],
)
def test_what_forbids_a_run(spec, ids, connect, speculation, refused):
    found = run_refusals(spec, ids, connect=connect, speculation=speculation)
    assert len(found) == len(refused)
    for text, words in zip(found, refused, strict=True):
        assert words in text
