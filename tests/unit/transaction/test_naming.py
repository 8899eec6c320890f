"""Transactional ids ``<prefix>-<slot>``: built, parsed and matched in one module.

README: "only ids ``<prefix>-<digits>`` count, so prefix ``a`` never matches ``ax-0``".
"""

from __future__ import annotations

import re

import pytest

from airflow_provider_kafka2pc import naming
from airflow_provider_kafka2pc.errors import ConfigurationError


@pytest.mark.parametrize(
    ("prefix", "slot", "built"),
    [
        pytest.param("orders", 0, "orders-0", id="orders slot 0 -> orders-0"),
        pytest.param("orders", 17, "orders-17", id="orders slot 17 -> orders-17"),
        pytest.param("a-eu", 3, "a-eu-3", id="a prefix with a dash keeps it: a-eu-3"),
        pytest.param("x.y:z", 1, "x.y:z-1", id="dots and colons pass through"),
    ],
)
def test_a_pooled_id_is_the_prefix_a_dash_and_the_slot_and_parses_back(prefix, slot, built):
    assert naming.build(prefix, slot) == built
    assert naming.prefix_of(built) == prefix
    assert naming.pattern(prefix).fullmatch(built)
    assert built.startswith(naming.starts(prefix))


@pytest.mark.parametrize(
    ("prefix", "candidate", "matches"),
    [
        pytest.param("a", "a-0", True, id="a matches a-0"),
        pytest.param("a", "a-123", True, id="a matches a-123"),
        pytest.param("a", "ax-0", False, id="a never matches ax-0 (README)"),
        pytest.param("a", "ab-0", False, id="a never matches ab-0"),
        pytest.param("a", "a-eu-0", False, id="a never matches another prefix a-eu-0"),
        pytest.param("a-eu", "a-eu-0", True, id="a-eu matches a-eu-0"),
        pytest.param("a", "a-", False, id="a does not match a- (no slot)"),
        pytest.param("a", "a-0x", False, id="a does not match a-0x (slot not digits)"),
        pytest.param("a", "a-0-1", False, id="a does not match a-0-1"),
        pytest.param("a", "xa-0", False, id="a does not match xa-0 (full match)"),
        pytest.param("a.b", "axb-0", False, id="a.b does not match axb-0 (the dot is literal)"),
        pytest.param("a.b", "a.b-4", True, id="a.b matches a.b-4"),
    ],
)
def test_only_ids_of_the_prefix_and_a_numeric_slot_match_its_pattern(prefix, candidate, matches):
    assert bool(naming.pattern(prefix).fullmatch(candidate)) is matches


@pytest.mark.parametrize(
    ("export_id", "prefix"),
    [
        pytest.param("orders", "orders", id="a valid export id is its own prefix"),
        pytest.param("daily orders/eu", "daily-orders-eu", id="spaces and slashes become dashes"),
        pytest.param("  orders  ", "orders", id="leading and trailing runs are dropped"),
        pytest.param("a.b:c_d", "a.b:c_d", id="dots, colons and underscores are kept"),
        pytest.param("///", "export", id="nothing usable -> export"),
        pytest.param("", "export", id="empty -> export"),
    ],
)
def test_the_default_prefix_is_derived_from_the_export_id(export_id, prefix):
    assert naming.default_prefix(export_id) == prefix
    assert naming.validate_prefix(prefix) == prefix


def test_a_long_export_id_gets_a_bounded_stable_prefix_ending_in_its_digest():
    long_id = "x" * 400
    prefix = naming.default_prefix(long_id)

    assert len(prefix) <= naming.MAX_DEFAULT_PREFIX_LENGTH
    assert prefix == naming.default_prefix(long_id)
    assert prefix != naming.default_prefix("x" * 401)
    assert re.fullmatch(r"x+\.[0-9a-f]{10}", prefix)
    naming.validate_prefix(prefix)


@pytest.mark.parametrize(
    ("prefix", "problem"),
    [
        pytest.param("", "must be a non-empty string", id="empty -> refused"),
        pytest.param(None, "must be a non-empty string", id="None -> refused"),
        pytest.param(7, "must be a non-empty string", id="not a string -> refused"),
        pytest.param("a b", "is invalid", id="a space -> refused"),
        pytest.param("a/b", "is invalid", id="a slash -> refused"),
        pytest.param("é", "is invalid", id="non-ASCII -> refused"),
        pytest.param("p" * 191, "longer than 190", id="191 characters -> refused (room for -slot)"),
        pytest.param("p" * 201, "is invalid", id="201 characters -> refused as an id"),
    ],
)
def test_an_unusable_prefix_is_refused_naming_the_field(prefix, problem):
    with pytest.raises(ConfigurationError, match="id_prefix") as refused:
        naming.validate_prefix(prefix)
    assert problem in str(refused.value)


@pytest.mark.parametrize(
    "prefix",
    [
        pytest.param("p" * 190, id="190 characters"),
        pytest.param("a", id="one character"),
        pytest.param("A-z.0_9:-", id="every allowed character class"),
    ],
)
def test_a_usable_prefix_is_returned_unchanged(prefix):
    assert naming.validate_prefix(prefix) == prefix


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        pytest.param("t" * 200, True, id="200 characters -> valid"),
        pytest.param("t" * 201, False, id="201 characters -> invalid"),
        pytest.param("run-1-0", True, id="run-1-0 -> valid"),
        pytest.param("run 1", False, id="a space -> invalid"),
    ],
)
def test_a_transactional_id_is_valid_only_within_the_safe_characters_and_length(value, ok):
    if ok:
        assert naming.validate_transactional_id(value) == value
    else:
        with pytest.raises(ConfigurationError, match="transactional_id"):
            naming.validate_transactional_id(value)


def test_a_prefix_whose_last_slot_would_be_too_long_is_refused_before_any_lease():
    naming.check_slots("p" * 190, 10)  # p...p-9: 192 characters
    with pytest.raises(ConfigurationError, match="id_prefix"):
        naming.check_slots("p" * 190, 10**10)  # p...p-9999999999: 201 characters


@pytest.mark.parametrize(
    ("prefix", "java"),
    [
        pytest.param("orders", r"\Qorders\E.*", id="quoted, then anything"),
        pytest.param("a.b", r"\Qa.b\E.*", id="regex characters are quoted"),
    ],
)
def test_the_brokers_prefix_pattern_quotes_the_prefix(prefix, java):
    assert naming.java_prefix_pattern(prefix) == java


def test_a_prefix_that_would_end_the_java_quote_is_refused():
    with pytest.raises(ConfigurationError, match=r"\\E"):
        naming.java_prefix_pattern(r"a\Eb")
