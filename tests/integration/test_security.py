"""Security on a real broker: SASL/SCRAM credentials reach every client, and show nowhere.

One Apache Kafka 4.4.0 broker with a SASL_PLAINTEXT listener (SCRAM-SHA-512, and PLAIN
for the one test that needs it). The librdkafka writer, the kafka-python control plane
(controller, audit), the spark-submit prepare application (its Python workers write) and
``kafka2pc commit`` in another process all work through that listener only, and the run
ends exactly once by the log audit and a read_committed consumer. Then every artefact is
grepped for the password in the forms it could take: DEBUG logs of both client
libraries, Spark's driver/executor output, the manifest, the committables, CLI output,
the command line, the config file handed to Spark, and the texts of the errors a wrong
password, an unreachable broker or bad settings raise.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import stat
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_kafka2pc.errors import (
    BrokerUnreachableError,
    ConfigurationError,
    Kafka2pcError,
)
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.spark.app import kafka_config, parse_args
from airflow_provider_kafka2pc.spark.job import private_config_file
from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from airflow_provider_kafka2pc.transaction.manifest import Manifest
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from devtools.broker import KafkaBroker
from devtools.broker.node import free_port
from devtools.spark_submit import submit_prepare
from tests.conftest import (
    TEST_BROKER_CONFIG,
    assert_exactly_once,
    cli,
    needs_local_broker,
    unique_id,
)

USER = "alice"
#: Distinctive, so that any copy of it anywhere is found; hex only, so its JSON and
#: repr forms are itself.
PASSWORD = "pw-" + uuid.uuid4().hex
#: A wrong password is a secret too (often a near miss of the right one).
WRONG_PASSWORD = "wrong-" + uuid.uuid4().hex
#: The broker also offers PLAIN (its token is the password in clear) for one test.
PLAIN_LISTENER = {
    "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'user_{USER}="{PASSWORD}";'
    ),
}


def secret_forms(password: str) -> dict[str, str]:
    """Every form in which ``password`` could show: as is, its random part alone, hex,
    and base64 at each of the three alignments (alone or inside a SASL PLAIN token),
    cut to the characters that do not depend on its neighbours."""
    raw = password.encode()
    forms = {"as is": password, "random part": password.split("-", 1)[1], "hex": raw.hex()}
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode()
        forms[f"base64@{offset}"] = encoded[4:-4]
    return forms


FORMS = {
    **secret_forms(PASSWORD),
    **{f"wrong {k}": v for k, v in secret_forms(WRONG_PASSWORD).items()},
}


def assert_no_secret(where: str, text: str | bytes) -> None:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    for name, form in FORMS.items():
        at = text.find(form)
        if at >= 0:
            context = text[max(0, at - 200) : at + len(form) + 100].replace(form, "<SECRET>")
            pytest.fail(f"{where}: the password ({name}) appears at {at}: ...{context}...")


# -- fixtures --------------------------------------------------------------------


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    needs_local_broker()
    broker = KafkaBroker(
        "4.4.0",
        data_dir=tmp_path_factory.mktemp("sasl") / "kafka",
        config={**TEST_BROKER_CONFIG, **PLAIN_LISTENER},
        sasl_users={USER: PASSWORD},
    )
    try:
        yield broker.start()
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def sasl(sasl_broker: KafkaBroker) -> dict[str, str]:
    """The only address these tests give any client: the SASL listener."""
    return sasl_broker.sasl_settings(USER)


@pytest.fixture(scope="module")
def sasl_protocol(sasl: dict[str, str]) -> Iterator[KafkaProtocol]:
    with KafkaProtocol(sasl, timeout_ms=10_000) as protocol:
        yield protocol


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Everything at DEBUG, kafka-python included (the CLI mutes it to WARNING)."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="kafka")
    return caplog


def make_topic(protocol: KafkaProtocol, partitions: int) -> str:
    name = f"sec-{uuid.uuid4().hex[:10]}"
    protocol.create_topic(name, partitions)
    return name


def rows(start: int, count: int) -> list[tuple[bytes, bytes]]:
    return [(str(i).encode(), json.dumps({"id": i}).encode()) for i in range(start, start + count)]


# -- both clients ----------------------------------------------------------------


def test_writer_and_control_plane_over_sasl_without_the_password_in_debug_logs(
    sasl, sasl_protocol, debug_logs
):
    topic = make_topic(sasl_protocol, 2)  # KafkaAdminClient: logs its config at DEBUG
    # librdkafka's own debug output, routed into Python logging by the writer.
    data_plane = {**sasl, "debug": "security,broker,conf"}
    committables = [
        TransactionalWriter(data_plane, unique_id("sec")).write(topic, rows(start, 40))
        for start in (0, 40)
    ]
    with KafkaProtocol(sasl, timeout_ms=10_000) as protocol:  # a fresh login, at DEBUG
        results = TransactionController(protocol).commit_all(committables)
    assert [r.outcome for r in results] == [Outcome.COMMITTED, Outcome.COMMITTED]
    assert_exactly_once(sasl_protocol, sasl, topic, *committables, committed=80, aborted=0)

    text = debug_logs.text
    # The grep can fail: both libraries' SASL exchanges and configurations were captured.
    assert "SaslAuthenticateRequest" in text  # kafka-python, DEBUG
    assert "Starting KafkaAdminClient with configuration" in text
    assert "sasl.password = [redacted]" in text  # librdkafka's conf dump
    assert "SASL" in text and "rdkafka#producer" in text
    assert_no_secret("Python logging (writer, librdkafka, kafka-python)", text)
    for committable in committables:
        assert_no_secret("committable JSON", committable.to_json())


def test_plain_token_is_scrubbed_from_kafka_python_debug_logs(sasl, debug_logs):
    """kafka-python logs PLAIN's token (user, user, password) three times per login."""
    plain = {**sasl, "sasl.mechanism": "PLAIN"}
    with KafkaProtocol(plain, timeout_ms=10_000) as protocol:
        assert list(protocol.partition_leaders(make_topic(protocol, 1))) == [0]
    assert "SaslAuthenticateRequest" in debug_logs.text
    assert "Send: " in debug_logs.text  # the raw frames
    assert_no_secret("kafka-python DEBUG, PLAIN", debug_logs.text)


# -- Spark's executors, then the CLI in another process ----------------------------


@pytest.mark.parametrize("writer", ["python", "jvm"])
def test_spark_submit_over_sasl_then_cli_commit_exactly_once_without_the_password(
    sasl, sasl_protocol, tmp_path, writer
):
    topic = make_topic(sasl_protocol, 2)
    source = tmp_path / "source.parquet"
    count = 200
    pq.write_table(
        pa.table({"id": list(range(count)), "name": [f"n{i}" for i in range(count)]}), source
    )
    manifest = tmp_path / "manifest.json"
    spark_log = tmp_path / "spark-submit.log"
    run = unique_id("sec")
    started = time.monotonic()
    done = submit_prepare(
        [
            "--source-path",
            str(source),
            "--topic",
            topic,
            "--transactional-ids",
            f"{run}-0,{run}-1",
            "--key-column",
            "id",
            "--manifest",
            str(manifest),
            "--writer",
            writer,
        ],
        master="local[2]",
        log_path=spark_log,
        kafka_config=sasl,  # only through a private file, removed afterwards
    )
    prepare_s = time.monotonic() - started
    driver_output = spark_log.read_text()
    assert done.returncode == 0, driver_output[-3000:].replace(PASSWORD, "<SECRET>")
    # What a user sees as the spark-submit command line: a path, never the settings.
    command = " ".join(done.args)
    assert_no_secret("spark-submit command line", command)
    config_path = Path(done.args[done.args.index("--kafka-config-file") + 1])
    assert not config_path.exists() and not config_path.parent.exists()
    assert_no_secret("spark-submit stdout", done.stdout)
    assert_no_secret("Spark driver/executor stderr", driver_output)
    assert "Running Spark version" in driver_output  # the log really is Spark's
    assert_no_secret("manifest", manifest.read_text())
    batch = Manifest.from_json(manifest.read_text())
    assert batch.source_rows == count and batch.metadata["writer"] == writer
    for committable in batch.committables:
        assert_no_secret("committable JSON", committable.to_json())

    # Another process commits; its settings come from a file only this user can read.
    config_file = tmp_path / "kafka.json"
    fd = os.open(config_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(sasl, handle)
    committed = cli("-v", "commit", "--config-file", str(config_file), str(manifest))
    config_file.unlink()
    assert committed.returncode == 0, committed.stdout + committed.stderr
    assert {r["outcome"] for r in json.loads(committed.stdout)["results"]} == {"COMMITTED"}
    assert_no_secret("kafka2pc commit stdout", committed.stdout)
    assert_no_secret("kafka2pc commit stderr", committed.stderr)
    assert_exactly_once(sasl_protocol, sasl, topic, *batch.committables, committed=count, aborted=0)
    print(f"spark-submit prepare over SASL: {prepare_s:.1f} s")


def test_the_config_file_for_spark_is_private_and_removed():
    settings = {"bootstrap.servers": "127.0.0.1:1", "sasl.password": PASSWORD}
    with private_config_file(settings) as path:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert json.loads(path.read_text()) == settings
    assert not path.exists() and not path.parent.exists()


def test_spark_app_warns_about_a_readable_config_file_and_refuses_a_non_object(tmp_path, caplog):
    readable = tmp_path / "readable.json"
    readable.write_text(json.dumps({"bootstrap.servers": "h:1", "sasl.password": PASSWORD}))
    readable.chmod(0o644)
    base = ["--source-table", "t", "--topic", "t", "--transactional-ids", "a", "--manifest", "m"]
    with caplog.at_level(logging.WARNING):
        config = kafka_config(parse_args([*base, "--kafka-config-file", str(readable)]))
    assert config["sasl.password"] == PASSWORD
    assert "readable by other users (mode 644)" in caplog.text
    assert_no_secret("spark app warning", caplog.text)

    array = tmp_path / "array.json"
    array.write_text(json.dumps([PASSWORD]))
    with pytest.raises(ConfigurationError, match="must be a JSON object") as refused:
        kafka_config(parse_args([*base, "--kafka-config-file", str(array)]))
    assert_no_secret("spark app error", str(refused.value))


# -- error texts: clear, actionable, without the secret ------------------------------


def wrong(settings: dict[str, str]) -> dict[str, str]:
    return {**settings, "sasl.password": WRONG_PASSWORD}


def test_wrong_password_on_the_writer_says_authentication_failed(sasl, sasl_protocol, caplog):
    topic = make_topic(sasl_protocol, 1)
    started = time.monotonic()
    with caplog.at_level(logging.DEBUG), pytest.raises(ConfigurationError) as refused:
        TransactionalWriter(wrong(sasl), unique_id("sec"), timeout_s=10).write(topic, rows(0, 1))
    message = str(refused.value)
    assert f"authentication failed for user '{USER}' (SCRAM-SHA-512)" in message
    assert sasl["bootstrap.servers"] in message and "sasl.password" in message
    print(f"refused login reported after {time.monotonic() - started:.1f} s (timeout 10 s)")
    assert_no_secret("writer error", message)
    assert_no_secret("writer logs", caplog.text)
    assert_exactly_once(sasl_protocol, sasl, topic, committed=0, aborted=0)  # nothing written


def test_wrong_password_on_the_control_plane_shows_no_secret(sasl, caplog):
    with caplog.at_level(logging.DEBUG), pytest.raises(Kafka2pcError) as refused:
        KafkaProtocol(wrong(sasl), timeout_ms=3000)
    assert sasl["bootstrap.servers"] in str(refused.value)
    assert_no_secret("control-plane error", str(refused.value))
    assert_no_secret("control-plane logs", caplog.text)


def test_wrong_password_on_the_control_plane_says_authentication_failed(sasl):
    with pytest.raises(Kafka2pcError) as refused:
        KafkaProtocol(wrong(sasl), timeout_ms=3000)
    assert f"authentication failed for user '{USER}' (SCRAM-SHA-512)" in str(refused.value)
    assert isinstance(refused.value, ConfigurationError)


def test_unreachable_sasl_broker_is_named_without_the_secret(sasl, caplog):
    dead = {**sasl, "bootstrap.servers": f"127.0.0.1:{free_port()}"}
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(BrokerUnreachableError) as control:
            KafkaProtocol(dead, timeout_ms=1500)
        with pytest.raises(BrokerUnreachableError) as data:
            TransactionalWriter(dead, unique_id("sec"), timeout_s=1.5).write("t", rows(0, 1))
    for error in (control.value, data.value):
        assert dead["bootstrap.servers"] in str(error)
        assert_no_secret("unreachable-broker error", str(error))
    assert_no_secret("unreachable-broker logs", caplog.text)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"sasl.pasword": PASSWORD}, "sasl.pasword"),  # a misspelt secret key
        ({"sasl.mechanism": "SCRAM-SHA-999"}, "SCRAM-SHA-999"),
        ({"security.protocol": "SASL_PLAINTEXTT"}, "security.protocol"),
    ],
)
def test_bad_settings_are_named_without_the_secret(sasl, extra, named):
    settings = {**sasl, **extra}
    with pytest.raises(ConfigurationError) as data:
        TransactionalWriter(settings, unique_id("sec"), timeout_s=2).write("t", rows(0, 1))
    assert named in str(data.value)
    assert_no_secret("writer settings error", str(data.value))
    if "sasl.pasword" not in extra:  # kafka-python ignores names it does not translate
        with pytest.raises(ConfigurationError) as control:
            KafkaProtocol(settings, timeout_ms=1500)
        assert named in str(control.value)
        assert_no_secret("control-plane settings error", str(control.value))


def test_cli_never_echoes_a_secret_given_on_its_command_line(sasl, tmp_path):
    committable = tmp_path / "c.json"
    committable.write_text(Committable.empty("sec-none", int(time.time() * 1000), 60_000).to_json())
    # A typo (":" for "="): the argument is refused without being echoed.
    typo = cli(
        "commit",
        "-b",
        sasl["bootstrap.servers"],
        "--config",
        f"sasl.password:{PASSWORD}",
        str(committable),
    )
    assert typo.returncode == 2, typo.stdout + typo.stderr
    assert "--config #1 is not KEY=VALUE" in json.loads(typo.stdout)["message"]
    # A secret on the command line works, with a warning that it is visible there.
    on_argv = cli(
        "txn",
        "list",
        *(arg for key, value in sasl.items() for arg in ("--config", f"{key}={value}")),
    )
    assert on_argv.returncode == 0, on_argv.stdout + on_argv.stderr
    assert "--config sasl.password puts a secret on the command line" in on_argv.stderr
    # A config file that is not JSON: the parser's message, not the file's content.
    broken = tmp_path / "broken.json"
    broken.write_text('{"sasl.password": "' + PASSWORD + '",}')
    bad_file = cli("commit", "--config-file", str(broken), str(committable))
    assert bad_file.returncode == 2, bad_file.stdout + bad_file.stderr
    assert str(broken) in bad_file.stdout
    for done in (typo, on_argv, bad_file):
        assert_no_secret("kafka2pc stdout", done.stdout)
        assert_no_secret("kafka2pc stderr", done.stderr)
