"""``kafka2pc``: the transaction core from the command line.

JSON on stdout; exit 0 only on success. Over 500 lines: one short function per command and
one per its arguments, kept together so the command line reads as one table of contents;
each command's work is in the core it calls.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from . import defaults
from .connection.acls import authorization_error
from .connection.settings import is_secret
from .connection.tls import check_tls
from .errors import CommittableError, ConfigurationError, Kafka2pcError
from .protocol.client import KafkaProtocol
from .protocol.records import ControlType
from .transaction.committable import Committable
from .transaction.controller import Outcome, RetryPolicy, TransactionController
from .transaction.manifest import Manifest
from .transaction.two_phase import REQUESTS, TwoPhaseMode, detect_two_phase

# Imported by the commands that use them, not here: every command pays this module's
# imports at process start, and ``kafka2pc commit`` (one process per export) needs no
# confluent-kafka (the classic writer, the ACL admin client) (docs/performance-startup.md).
# A local broker for development: ``python -m devtools broker`` in a checkout.

EXIT_FAILED = 1
EXIT_USAGE = 2


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kafka").setLevel(logging.WARNING)
    try:
        return args.run(args)
    except (ConfigurationError, CommittableError) as exc:
        return _fail(exc, EXIT_USAGE)
    except Kafka2pcError as exc:
        return _fail(exc, EXIT_FAILED)
    except KeyboardInterrupt:
        return 130


def _fail(exc: Exception, code: int) -> int:
    _emit({"error": type(exc).__name__, "message": str(exc)})
    print(f"kafka2pc: {exc}", file=sys.stderr)
    return code


def _emit(data: Any) -> None:
    print(json.dumps(data, sort_keys=True), flush=True)


# -- settings -----------------------------------------------------------------


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """librdkafka-style settings from --config-file, then --config, then --bootstrap-servers."""
    settings: dict[str, Any] = {}
    if args.config_file:
        try:
            loaded = json.loads(Path(args.config_file).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigurationError(f"--config-file {args.config_file}: {exc}") from None
        if not isinstance(loaded, dict):
            raise ConfigurationError(f"--config-file {args.config_file}: must be a JSON object")
        settings.update(loaded)
    for number, item in enumerate(args.config, start=1):
        key, sep, value = item.partition("=")
        if not sep or not key:
            # Not echoed: without "=" there is no telling a key from a password.
            raise ConfigurationError(
                f"--config #{number} is not KEY=VALUE (its text is not shown; it may be a secret)"
            )
        if is_secret(key):
            logging.getLogger("kafka2pc.cli").warning(
                "--config %s puts a secret on the command line (visible to other users in "
                "the process list); prefer --config-file",
                key,
            )
        settings[key] = value
    if args.bootstrap_servers:
        settings["bootstrap.servers"] = args.bootstrap_servers
    if "bootstrap.servers" not in settings:
        raise ConfigurationError("--bootstrap-servers is required (or bootstrap.servers in config)")
    return settings


def _protocol(args: argparse.Namespace) -> KafkaProtocol:
    # KafkaProtocol names a TLS problem before anything opens.
    return KafkaProtocol(_settings(args), timeout_ms=args.timeout_ms)


@contextlib.contextmanager
def _refusals(
    args: argparse.Namespace,
    action: str,
    *,
    transactional_ids: Sequence[str] = (),
    topics: Sequence[str] = (),
) -> Iterator[None]:
    """The broker's authorization refusals as errors naming the missing ACL."""
    try:
        yield
    except Exception as exc:  # nothing swallowed: a refusal is re-raised as one, the rest as is
        refused = authorization_error(
            exc, _settings(args), action, transactional_ids=transactional_ids, topics=topics
        )
        if refused is None:
            raise
        raise refused from None


# -- commands -----------------------------------------------------------------


def _cmd_topic_create(args: argparse.Namespace) -> int:
    if args.partitions < 1:
        raise ConfigurationError("--partitions must be >= 1")
    with _refusals(args, "create topics", topics=[args.topic]), _protocol(args) as protocol:
        protocol.create_topic(args.topic, args.partitions)
        leaders = protocol.partition_leaders(args.topic, wait_s=defaults.TOPIC_WAIT_S)
    _emit({"topic": args.topic, "partitions": len(leaders)})
    return 0


def _read_jsonl(path: str, key_field: str | None) -> Iterator[tuple[bytes | None, bytes]]:
    """Yield (key, value) per JSON-object line; a bad line raises (and aborts the write)."""
    stream = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115
    with stream:
        for number, line in enumerate(stream, start=1):
            text = line.strip()
            if not text:
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ConfigurationError(f"{path} line {number}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise ConfigurationError(f"{path} line {number}: not a JSON object")
            key = None
            if key_field is not None:
                if row.get(key_field) is None:
                    raise ConfigurationError(
                        f"{path} line {number}: key field {key_field!r} missing or null"
                    )
                value = row[key_field]
                key = (value if isinstance(value, str) else json.dumps(value)).encode()
            yield key, text.encode()


def _cmd_prepare(args: argparse.Namespace) -> int:
    if args.input != "-" and not Path(args.input).is_file():
        raise ConfigurationError(f"--input {args.input}: no such file")
    rows = _read_jsonl(args.input, args.key_field)
    with _refusals(args, "prepare", transactional_ids=[args.transactional_id], topics=[args.topic]):
        committable = _prepare(args, rows)
    _emit(committable.to_dict())
    return 0


def _prepare(args: argparse.Namespace, rows: Iterator[tuple[bytes | None, bytes]]) -> Committable:
    from .transaction.native_writer import NativeWriter
    from .transaction.writer import TransactionalWriter

    mode = TwoPhaseMode.CLASSIC
    if args.two_phase != "classic":  # classic asks the broker nothing extra
        with _protocol(args) as protocol:
            mode = detect_two_phase(
                protocol,
                args.two_phase,
                transactional_id=args.transactional_id,
                transaction_timeout_ms=args.transaction_timeout_ms,
                deadline_s=args.timeout_ms / 1000,
            )
            if mode is TwoPhaseMode.NATIVE:
                native = NativeWriter(
                    protocol,
                    args.transactional_id,
                    transaction_timeout_ms=args.transaction_timeout_ms,
                    deadline_s=args.timeout_ms / 1000,
                )
                committable = native.write(args.topic, rows)
    if mode is TwoPhaseMode.CLASSIC:
        settings = _settings(args)
        check_tls(settings, args.timeout_ms / 1000)
        writer = TransactionalWriter(
            settings,
            args.transactional_id,
            transaction_timeout_ms=args.transaction_timeout_ms,
            timeout_s=args.timeout_ms / 1000,
        )
        committable = writer.write(args.topic, rows)
    return committable


def _load_committables(source: str) -> list[Committable]:
    """A committable object, a JSON array of them, or a prepare manifest (Manifest)."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
    except OSError as exc:
        raise ConfigurationError(f"committable file {source}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommittableError(f"{source}: not valid JSON ({exc.msg})") from None
    if isinstance(data, list):
        return [Committable.from_dict(item) for item in data]
    if isinstance(data, dict) and "committables" in data:
        return list(Manifest.from_json(text).committables)
    return [Committable.from_dict(data)]


def _finish(args: argparse.Namespace, result: ControlType) -> int:
    committables = _load_committables(args.committable)
    with (
        _refusals(
            args,
            result.name.lower(),
            transactional_ids=sorted({c.transactional_id for c in committables}),
            topics=sorted({p.topic for c in committables for p in c.partitions}),
        ),
        _protocol(args) as protocol,
    ):
        controller = TransactionController(protocol, RetryPolicy(deadline_s=args.deadline_s))
        results = controller.finish_all(committables, result)
    if len(results) == 1:
        _emit(results[0].to_dict())
    else:
        _emit({"results": [r.to_dict() for r in results]})
    for r in results:
        if r.outcome is Outcome.LOST and result is ControlType.COMMIT:
            # No ledger here to record a copy, so a second run could copy twice: the
            # repair from the log is the ledger's (kafka2pc recover, the commit task).
            print(
                f"kafka2pc: {r.transactional_id} LOST ({r.reason}): its aborted records stay "
                "in the log until retention removes them; `kafka2pc recover --export-id ...` "
                "(with the export's ledger) copies them into a new transaction and commits it",
                file=sys.stderr,
            )
    return 0 if all(r.outcome in Outcome.sought(result) for r in results) else EXIT_FAILED


def _cmd_fence(args: argparse.Namespace) -> int:
    with (
        _refusals(args, "fence", transactional_ids=[args.transactional_id]),
        _protocol(args) as protocol,
    ):
        result = TransactionController(protocol).fence(args.transactional_id)
    _emit(
        {
            "transactional_id": result.transactional_id,
            "producer_id": result.producer_id,
            "producer_epoch": result.producer_epoch,
            "fenced": True,
        }
    )
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    from .transaction.audit import audit_topic

    committables = [c for path in args.committables for c in _load_committables(path)]
    # An export of several topics: each named by its committables' ranges, unless given.
    named = {r.topic for c in committables for r in c.partitions}
    topics = list(dict.fromkeys(args.topic or sorted(named)))
    if not topics:
        raise ConfigurationError("give --topic, or --committables whose ranges name the topics")
    with _refusals(args, "audit", topics=topics), _protocol(args) as protocol:
        reports = [
            audit_topic(protocol, topic, committables, duplicates=args.duplicates)
            for topic in topics
        ]
    if len(reports) == 1:
        _emit(reports[0].to_dict())
    else:
        _emit({"topics": {r.topic: r.to_dict() for r in reports}})
    return 0


def _cmd_txn_list(args: argparse.Namespace) -> int:
    with _refusals(args, "list transactions"), _protocol(args) as protocol:
        listed = protocol.list_transactions(args.prefix, args.state or None)
        _emit({"transactions": [row.to_dict() for row in listed]})
    return 0


def _cmd_txn_describe(args: argparse.Namespace) -> int:
    with (
        _refusals(args, "describe", transactional_ids=args.transactional_id),
        _protocol(args) as protocol,
    ):
        described = protocol.describe_transactions(args.transactional_id)
        _emit({"transactions": [d.to_dict() for d in described]})
    return 0


def _cmd_acls(args: argparse.Namespace) -> int:
    from .connection.acls import apply_acls, export_acls

    entries = export_acls(args.principal, args.id_prefix, args.topic)
    applied = False
    if args.apply:
        settings = _settings(args)
        check_tls(settings, args.timeout_ms / 1000)
        apply_acls(settings, entries, args.timeout_ms)
        applied = True
    _emit(
        {
            "principal": args.principal,
            "id_prefix": args.id_prefix,
            "topics": list(dict.fromkeys(args.topic)),
            "acls": [e.to_dict() for e in entries],
            "applied": applied,
        }
    )
    return 0


#: Where ``kafka2pc recover`` finds the ledger when --ledger-url is not given (keeps a
#: PostgreSQL password off the command line).
LEDGER_URL_ENV = "KAFKA2PC_LEDGER_URL"


def _open_ledger(url: str | None, from_argv: bool) -> tuple[Any, str]:
    """The existing ledger at ``url``, never a new one: a mistyped SQLite path would
    otherwise give an empty ledger, in which every open transaction looks abandoned."""
    from .ledger import Ledger

    url, shown = _existing_ledger_url(url, from_argv)
    return Ledger(url, migrate=False), shown


def _existing_ledger_url(url: str | None, from_argv: bool) -> tuple[str, str]:
    """``url`` checked (a database URL; for SQLite an existing file), and as shown."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if not url:
        raise ConfigurationError(f"--ledger-url is required (or set {LEDGER_URL_ENV})")
    try:
        parsed = make_url(url)
    except ArgumentError:
        # Not echoed: it may hold a password.
        raise ConfigurationError("--ledger-url is not a database URL") from None
    if parsed.password and from_argv:
        logging.getLogger("kafka2pc.cli").warning(
            "--ledger-url puts a password on the command line (visible to other users in "
            "the process list); prefer %s",
            LEDGER_URL_ENV,
        )
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").is_file():
        raise ConfigurationError(f"no ledger at {shown}: the SQLite file does not exist")
    return url, shown


def _cmd_ledger_upgrade(args: argparse.Namespace) -> int:
    from .ledger import database

    url, shown = _existing_ledger_url(
        args.ledger_url or os.environ.get(LEDGER_URL_ENV), args.ledger_url is not None
    )
    engine = database.open_engine(database.normalise_url(url))
    try:
        was = database.schema_revision(engine)
        if was is None:
            raise ConfigurationError(
                f"no kafka2pc ledger at {shown} (no schema revision recorded): nothing was "
                "changed; the first export task creates it"
            )
        database.migrate(engine)
        now = database.schema_revision(engine)
    finally:
        engine.dispose()
    print(json.dumps({"ledger": shown, "from": was, "to": now}))
    return 0


def _cmd_recover(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from sqlalchemy.exc import SQLAlchemyError

    from .coordination.recovery import recover
    from .transaction.log import LogReader
    from .transaction.log_copy import LogCopy

    if args.grace_period_s < 0:
        raise ConfigurationError("--grace-period-s must be >= 0")
    from_argv = args.ledger_url is not None
    ledger, shown = _open_ledger(args.ledger_url or os.environ.get(LEDGER_URL_ENV), from_argv)
    with ledger:
        try:
            prefixes = args.id_prefix or sorted(
                {b.id_prefix for b in ledger.in_doubt(args.export_id)}
            )
            if not prefixes:
                raise ConfigurationError(
                    f"no in-doubt batch of export {args.export_id!r} names its id prefix: "
                    "pass --id-prefix (its transactional ids are <prefix>-<slot>)"
                )
            for prefix in prefixes:
                if not ledger.leases(prefix):
                    raise ConfigurationError(
                        f"the ledger at {shown} never leased an id under prefix {prefix!r}: "
                        "wrong --ledger-url or --id-prefix? Nothing was touched"
                    )
        except SQLAlchemyError as exc:
            raise ConfigurationError(
                f"cannot read a kafka2pc ledger at {shown} ({type(exc).__name__})"
            ) from None
        with (
            _refusals(args, f"recover export {args.export_id!r}"),
            _protocol(args) as protocol,
        ):
            controller = TransactionController(protocol, RetryPolicy(deadline_s=args.deadline_s))
            log_copy = (
                None if args.no_repair_from_log else LogCopy(LogReader(protocol), _settings(args))
            )
            report = recover(
                ledger,
                protocol,
                controller,
                args.export_id,
                prefixes,
                grace_period=timedelta(seconds=args.grace_period_s),
                dry_run=args.dry_run,
                log_copy=log_copy,
            )
    _emit(report.to_dict())
    for key, why in report.failed.items():
        print(f"kafka2pc: needs a person: {key}: {why}", file=sys.stderr)
    return 0 if report.done else EXIT_FAILED


# -- parser -------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(json.dumps({"error": "UsageError", "message": message}))
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kafka2pc", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    commands = parser.add_subparsers(required=True, metavar="COMMAND", parser_class=_Parser)
    for add in (
        _add_topic,
        _add_prepare,
        _add_finish,
        _add_fence,
        _add_audit,
        _add_txn,
        _add_recover,
        _add_ledger,
        _add_acls,
    ):
        add(commands)
    return parser


def _command(parent: Any, name: str, run: Any, help_text: str) -> argparse.ArgumentParser:
    """A sub-command that talks to Kafka: it takes the connection options."""
    sub = _plain_command(parent, name, run, help_text)
    sub.add_argument("--bootstrap-servers", "-b", help="host:port[,host:port...]")
    sub.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="librdkafka-style setting (security.protocol, sasl.*, ssl.*)",
    )
    sub.add_argument(
        "--config-file",
        help="JSON object of librdkafka-style settings (keeps secrets off the command line)",
    )
    sub.add_argument(
        "--timeout-ms",
        type=int,
        default=defaults.REQUEST_TIMEOUT_MS,
        help="bound on connecting and on each request (default %(default)s)",
    )
    return sub


def _plain_command(parent: Any, name: str, run: Any, help_text: str) -> argparse.ArgumentParser:
    sub = parent.add_parser(name, help=help_text, description=help_text)
    sub.set_defaults(run=run)
    return sub


def _group(commands: Any, name: str, help_text: str) -> Any:
    return commands.add_parser(name, help=help_text).add_subparsers(
        required=True, metavar="ACTION", parser_class=_Parser
    )


def _add_topic(commands: Any) -> None:
    sub = _command(
        _group(commands, "topic", "topic administration"),
        "create",
        _cmd_topic_create,
        "create a topic",
    )
    sub.add_argument("--topic", "-t", required=True)
    sub.add_argument("--partitions", type=int, default=1)


def _add_prepare(commands: Any) -> None:
    sub = _command(
        commands,
        "prepare",
        _cmd_prepare,
        "write a JSONL file into a new transaction and leave it open",
    )
    sub.add_argument("--topic", "-t", required=True)
    sub.add_argument("--transactional-id", required=True)
    sub.add_argument("--input", required=True, help="JSONL file (one JSON object a line) or -")
    sub.add_argument("--key-field", help="use this field's value as the record key")
    sub.add_argument("--transaction-timeout-ms", type=int, default=defaults.TRANSACTION_TIMEOUT_MS)
    sub.add_argument(
        "--two-phase",
        choices=REQUESTS,
        default="classic",
        help="classic (default): librdkafka, aborted at the transaction timeout; native: "
        "KIP-939 2PC, never times out, needs a broker with "
        "transaction.two.phase.commit.enable and unstable.api.versions.enable (no released "
        "broker offers it by default); auto: native where the broker grants it",
    )


def _add_finish(commands: Any) -> None:
    for name, run, text in (
        ("commit", lambda a: _finish(a, ControlType.COMMIT), "commit prepared transactions"),
        ("abort", lambda a: _finish(a, ControlType.ABORT), "abort prepared transactions"),
    ):
        sub = _command(commands, name, run, text)
        sub.add_argument(
            "committable", help="committable JSON (object, array, or a prepare manifest), or -"
        )
        sub.add_argument(
            "--deadline-s",
            type=float,
            default=defaults.FINISH_DEADLINE_S,
            help="give up retrying after this long (default %(default)s)",
        )


def _add_fence(commands: Any) -> None:
    sub = _command(
        commands,
        "fence",
        _cmd_fence,
        "re-initialise a transactional id, aborting whatever it left open",
    )
    sub.add_argument("--transactional-id", required=True)


def _add_audit(commands: Any) -> None:
    sub = _command(
        commands,
        "audit",
        _cmd_audit,
        "count committed/aborted/open records from the log's transaction markers",
    )
    sub.add_argument(
        "--topic",
        "-t",
        action="append",
        help="a topic to audit (repeatable); default: every topic the committables' ranges "
        "name (an export of several topics)",
    )
    sub.add_argument("--committables", nargs="*", default=[], metavar="FILE")
    sub.add_argument("--duplicates", action="store_true", help="report repeated committed keys")


def _add_txn(commands: Any) -> None:
    txn = _group(commands, "txn", "broker-side transaction listing")
    sub = _command(txn, "list", _cmd_txn_list, "list transactions (ListTransactions)")
    sub.add_argument(
        "--prefix",
        help="only transactional ids starting with this (a broker-side pattern on Kafka 4.1+)",
    )
    sub.add_argument(
        "--state", action="append", help="only these states (Ongoing, PrepareCommit, ...)"
    )
    sub = _command(txn, "describe", _cmd_txn_describe, "describe transactions by id")
    sub.add_argument("--transactional-id", required=True, action="append")


def _add_recover(commands: Any) -> None:
    sub = _command(
        commands,
        "recover",
        _cmd_recover,
        "resolve an export's dangling transactions: in-doubt ledger batches by their "
        "verdicts, and transactions open on the broker under its id prefix (commit by a "
        "COMMIT verdict, abort + fence by ABORT, fence when no batch holds the id after the "
        "grace period); never a live run's. JSON report; exit 0 only when nothing is left",
    )
    sub.add_argument("--export-id", required=True)
    sub.add_argument(
        "--id-prefix",
        action="append",
        help="the export's transactional-id prefix (ids <prefix>-<slot>); repeatable; "
        "default: the prefixes of its in-doubt batches",
    )
    sub.add_argument(
        "--ledger-url",
        help=f"the ledger's SQLAlchemy URL (default ${LEDGER_URL_ENV}); an existing ledger only",
    )
    sub.add_argument(
        "--grace-period-s",
        type=float,
        default=defaults.GRACE_PERIOD.total_seconds(),
        help="a batch unchanged this long, or an open transaction no batch holds, counts as "
        "abandoned (default %(default)s; longer than your slowest prepare)",
    )
    sub.add_argument(
        "--dry-run", action="store_true", help="report what would be done, touch nothing"
    )
    sub.add_argument(
        "--no-repair-from-log",
        action="store_true",
        help="do not copy a lost participant of a COMMIT verdict from the log into a new "
        "transaction (the default while its aborted records are retained); report it instead",
    )
    sub.add_argument(
        "--deadline-s",
        type=float,
        default=defaults.FINISH_DEADLINE_S,
        help="give up retrying one commit/abort/fence after this long (default %(default)s)",
    )


def _add_ledger(commands: Any) -> None:
    ledger = _group(commands, "ledger", "the coordinator ledger's schema")
    sub = _plain_command(
        ledger,
        "upgrade",
        _cmd_ledger_upgrade,
        "migrate an existing ledger to the schema this provider reads (export tasks do it "
        "when they open the ledger; the Kafka exports page and `recover` only read it)",
    )
    sub.add_argument(
        "--ledger-url",
        help=f"the ledger's SQLAlchemy URL (default ${LEDGER_URL_ENV}); an existing ledger only",
    )


def _add_acls(commands: Any) -> None:
    sub = _command(
        commands,
        "acls",
        _cmd_acls,
        "print (JSON) exactly the ACLs an export's principal needs: WRITE, READ and DESCRIBE "
        "on its topics, WRITE and DESCRIBE on TRANSACTIONAL_ID PREFIXED '<id prefix>-'; "
        "with --apply, create them (connect as a principal allowed to alter ACLs)",
    )
    sub.add_argument("--principal", required=True, help="the export's principal, e.g. User:orders")
    sub.add_argument("--id-prefix", required=True, help="the export's transactional-id prefix")
    sub.add_argument("--topic", "-t", required=True, action="append", help="repeatable")
    sub.add_argument("--apply", action="store_true", help="create the ACLs on the cluster")


if __name__ == "__main__":
    sys.exit(main())
