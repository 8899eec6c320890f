"""``python -m devtools``: the developer commands, run from a checkout (not installed).

``broker`` runs Apache Kafka on loopback until stopped (one KRaft node, or a replicated
cluster); ``demo`` is ``make demo``. Users bring their own Kafka and run ``kafka2pc``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from airflow_provider_kafka2pc.errors import ConfigurationError, Kafka2pcError

from .broker.version import DEFAULT_KAFKA_VERSION

EXIT_FAILED = 1
EXIT_USAGE = 2


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        return args.run(args)
    except ConfigurationError as exc:
        return _fail(exc, EXIT_USAGE)
    except Kafka2pcError as exc:
        return _fail(exc, EXIT_FAILED)
    except KeyboardInterrupt:
        return 130


def _fail(exc: Exception, code: int) -> int:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
    print(f"devtools: {exc}", file=sys.stderr)
    return code


def _cmd_broker(args: argparse.Namespace) -> int:
    from .broker import KafkaBroker, KafkaCluster

    data_dir = Path(args.data_dir) if args.data_dir else None
    if args.nodes != 1:
        if args.port is not None:
            raise ConfigurationError("--port applies to one node; a cluster picks free ports")
        with KafkaCluster(args.kafka_version, nodes=args.nodes, data_dir=data_dir) as cluster:
            print(json.dumps(cluster.describe(), sort_keys=True), flush=True)
            _serve_until_stopped()
        return 0
    with KafkaBroker(args.kafka_version, port=args.port, data_dir=data_dir) as broker:
        started = {
            "bootstrap_servers": broker.bootstrap_servers,
            "pid": broker.pid,
            "kafka_version": broker.version,
            "log": str(broker.log_path),
        }
        print(json.dumps(started, sort_keys=True), flush=True)
        _serve_until_stopped()
    return 0


def _serve_until_stopped() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.suppress(KeyboardInterrupt):
        signal.pause()


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import main as demo

    return demo()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m devtools", description=__doc__)
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    text = (
        "run Apache Kafka on loopback until stopped; its jars are fetched from Maven "
        "Central on first use"
    )
    broker = commands.add_parser("broker", help=text, description=text)
    broker.set_defaults(run=_cmd_broker)
    broker.add_argument("--port", type=int, default=None, help="TCP port (default: a free one)")
    broker.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="1 (default), or 3 or more: a replicated KRaft cluster (RF 3, min ISR 2)",
    )
    broker.add_argument(
        "--kafka-version",
        default=DEFAULT_KAFKA_VERSION,
        help=f"Apache Kafka release (default {DEFAULT_KAFKA_VERSION})",
    )
    broker.add_argument(
        "--data-dir",
        help="storage, config and broker.log; kept, and reused on the next start "
        "(default: a temporary directory removed at exit)",
    )
    text = "make demo: the example DAG exports one day exactly once, proved from the log"
    demo = commands.add_parser("demo", help=text, description=text)
    demo.set_defaults(run=_cmd_demo)
    return parser


if __name__ == "__main__":
    sys.exit(main())
