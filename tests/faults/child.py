"""One export run in its own process: ``python -m tests.faults.child SPEC``.

``SPEC`` is JSON: ``home`` (the Airflow home; the same one again = the same deployment
re-running the interval), ``dag_id``, ``topic``, ``day``, ``rows``, ``num_partitions``,
``retries``, ``retry_delay_s``, ``options`` (more :func:`kafka_exactly_once_export`
options), ``fault_dir`` and ``faults`` (``{task: [factory, params]}``, see
:mod:`tests.faults.injected`). Prints ``RESULT {json}`` when ``dag.test()`` returns; a
process killed at a fault point prints nothing and exits by SIGKILL.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    from tests.airflow import env

    env.configure(Path(spec["home"]))
    return run(spec)


def run(spec: dict[str, Any]) -> int:
    """The run itself, Airflow configured for ``spec["home"]`` (here or by the fork server,
    :mod:`tests.faults.forkserver`)."""
    from tests.airflow import dagtest
    from tests.faults import injected

    dagtest.migrate()
    options: dict[str, Any] = dict(spec.get("options") or {})
    if "grace_period_s" in options:
        options["grace_period"] = timedelta(seconds=options.pop("grace_period_s"))
    classes = injected.operator_classes(spec.get("fault_dir", ""), spec.get("faults") or {})
    dag = dagtest.export_dag(
        spec["dag_id"],
        topic=spec["topic"],
        rows=spec.get("rows", 300),
        num_partitions=spec.get("num_partitions", 3),
        retries=spec.get("retries", 0),
        operator_classes=classes,
        **options,
    )
    if "retry_delay_s" in spec:
        for task in dag.tasks:
            task.retry_delay = timedelta(seconds=spec["retry_delay_s"])
    result = dagtest.run(dag, spec["day"])
    payload = {
        **result.to_dict(),
        "prepared": result.xcom("prepare"),
        "verdict": result.xcom("decide", key="verdict"),
        "committed": result.xcom("commit"),
        "aborted": result.xcom("abort", key="abort"),
    }
    dagtest.print_result(payload)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
