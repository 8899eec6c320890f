"""``make soak``: the long chaos soak. ``python -m tests.soak --help`` for the options.

Prints each fault as it strikes and a JSON line of figures at the end; exits 1 naming the
first anomaly and the seed that replays it.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from .run import SoakConfig, run_soak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make soak", description=__doc__)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one, printed")
    parser.add_argument("--intervals", type=int, default=30, help="days backfilled (30)")
    parser.add_argument("--concurrency", type=int, default=3, help="runs at a time (3)")
    parser.add_argument("--rows", type=int, default=100, help="orders per interval (100)")
    parser.add_argument("--partitions", type=int, default=2, help="participants per run (2)")
    parser.add_argument("--window-s", type=float, default=3600.0, help="nemesis window cap")
    parser.add_argument("--workdir", type=Path, default=Path(".kafka2pc-soak"))
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1_000_000)
    config = SoakConfig(
        seed=seed,
        intervals=args.intervals,
        concurrency=args.concurrency,
        rows=args.rows,
        partitions=args.partitions,
        window_s=args.window_s,
        workdir=args.workdir,
    )
    result = run_soak(config, log=lambda line: print(line, flush=True))
    print(json.dumps(result.figures))
    print(f"history: {result.history_path}")
    if not result.ok:
        print(result.failure(), file=sys.stderr)
        return 1
    print(f"soak seed {seed}: 0 anomalies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
