"""Every default of the package, defined once.

The three a deployment tunes (grace period, commit margin, transaction timeout) are also
declared in the provider's ``[kafka2pc]`` configuration section (``get_provider_info``):
a value set there wins over the one here wherever an operator or the export is not given
one explicitly. Free of Airflow, so the core, the CLI and the Spark job read it too.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import Final

# -- connections -------------------------------------------------------------------------------

#: The official Kafka provider's connection id (``KafkaBaseHook.default_conn_name``).
KAFKA_CONN_ID: Final = "kafka_default"
#: The Spark provider's connection id (``SparkSubmitHook.default_conn_name``).
SPARK_CONN_ID: Final = "spark_default"

# -- the run -----------------------------------------------------------------------------------

#: The run key: the data interval, stable across retries, clears and backfills.
RUN_KEY: Final = "{{ data_interval_start | ts }}/{{ data_interval_end | ts }}"

# -- timing (the deployment knobs first) -------------------------------------------------------

#: How long a batch may stay unchanged, or a transaction without a ledger record stay open,
#: before recovery counts it as abandoned; longer than the slowest prepare.
GRACE_PERIOD: Final = timedelta(hours=1)
#: Time the commit needs before the earliest transaction timeout, or the verdict is ABORT.
COMMIT_MARGIN_S: Final = 60.0
#: How long a prepared transaction may stay open; at most the broker's
#: ``transaction.max.timeout.ms`` (15 min by default).
TRANSACTION_TIMEOUT_MS: Final = 900_000
#: Seconds between recovery rounds while something is left (sensor pokes, trigger polls).
RECOVER_POLL_INTERVAL_S: Final = 30.0
#: Bound on connecting and on each control-plane request.
REQUEST_TIMEOUT_MS: Final = 30_000
#: Bound on one node's try at a request any node can answer (Metadata, FindCoordinator)
#: while other nodes are left to try: a paused (SIGSTOPped, GC-frozen) node keeps its
#: connection open and never answers, so waiting a whole request timeout on it is waste.
#: The last node left gets the whole request timeout (a slow cluster is not a dead one).
ANY_NODE_ATTEMPT_MS: Final = 3_000
#: Retry budget of one commit, abort or fence from the orchestrator (a coordinator that
#: moves needs a few seconds; a broker that restarts, tens).
FINISH_DEADLINE_S: Final = 120.0
#: How long librdkafka may try to deliver one record (``message.timeout.ms``) unless the
#: settings say: long enough to ride a partition leader's failover (the controller fences a
#: dead broker after ``broker.session.timeout.ms``, 9 s by default, then elects), short
#: enough that a write with no broker left fails in about a minute instead of sitting out
#: the transaction timeout. Never more than half the transaction timeout.
DELIVERY_TIMEOUT_MS: Final = 60_000
#: Retry budget of the writer's own control-plane calls (2PC grants, its abort).
WRITER_DEADLINE_S: Final = 30.0
#: Timeout InitProducerId registers when it fences an id (it opens no transaction).
FENCE_TIMEOUT_MS: Final = 60_000
#: How long the prepare's topic check asks again while the broker does not know a topic or
#: its leaders yet: Kafka's AdminClient says brokers may learn of a new topic seconds after
#: CreateTopics succeeded (a DAG that creates the topic just before the export).
TOPIC_WAIT_S: Final = 3.0
#: How long recovery waits for a transaction the coordinator is already ending (Prepare*).
SETTLE_S: Final = 5.0
#: Loss-repair rounds one commit may run (a repaired participant can be lost again when the
#: commit is delayed past its timeout once more).
MAX_REPAIRS: Final = 2

#: Seconds between a partition's progress lines while the prepare job writes (0: none).
PROGRESS_INTERVAL_S: Final = 30.0

# -- the Kafka exports page (Airflow UI plugin) -------------------------------------------------

#: Batches shown per export (its in-doubt ones are shown whatever their age).
UI_RECENT_BATCHES: Final = 10
#: Bound on connecting to the broker while the page is drawn: a broker that is down makes
#: the page say so after this long instead of hanging.
UI_REQUEST_TIMEOUT_MS: Final = 5_000

# -- the Spark prepare job ---------------------------------------------------------------------


def spark_conf(*extra: dict[str, str] | None) -> dict[str, str]:
    """Spark settings for the prepare job: quiet logs, and Python workers on this
    interpreter (a worker on another one cannot import this package); ``extra`` wins."""
    conf = {
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": "WARN",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
    }
    for more in extra:
        conf.update(more or {})
    return conf
