"""The shared benchmark harness: one broker, the same data, interleaved rounds, verified output.

Every benchmark in this directory is built from these parts and keeps only what it
measures:

- :class:`Cluster`: the broker (the package's ``KafkaBroker``, or ``--bootstrap-servers``),
  fresh topics under one prefix, deleted after their check;
- :class:`Dataset`: deterministic records, parquet files, their digest and per-partition
  counts;
- :func:`measure`: wall time, CPU of this process and its descendants by group, the broker's
  CPU; peak resident memory per process, per group and of the broker;
- :func:`read_gc_log` / :func:`heap_after_full_gc`: a JVM's heap after garbage collection,
  from its GC log (a spark-submit JVM) or asked with jcmd (the broker);
- :func:`interleave`: an untimed warm-up, then rounds with a rotating order;
- :func:`checked` / :func:`verify_topic`: log audit + read_committed + digest of every output
  (``Expected(streaming=True)``: in bounded memory, whatever the size);
- ``print_*``: the tables, printed the same way by every benchmark;
- :func:`maven_jars`, :func:`python_venv`: the peers, fetched once;
- :func:`spark_submit`, :func:`timeline`: spark-submit on equal terms, phases from the event log;
  :func:`kafka2pc_commit`: the commit a prepare's manifest needs, as a commit task runs it;
- :func:`watch_executors`, :func:`executor_starts`: a Spark cluster's executor JVMs, when
  each started (``/proc``), registered and ran its first task (the event log);
- :func:`connect_server`, :func:`server_phases`: a warm Spark Connect server, and one client's
  jobs cut out of its event log;
- :class:`CoreTimeline`: where each core's time went in a run (idle core-seconds per phase,
  a per-core timeline as text and SVG);
- :func:`profiled`: py-spy over every Python process of an extra, untimed run;
- :func:`add_subset_argument` / :func:`parse_subset`: ``--systems``-style options;
  :func:`positive_int`: counts (rows, rounds) of at least 1; :func:`setting`: ``KEY=VALUE``.
"""

from .cluster import Cluster, add_cluster_arguments
from .connect import ConnectServer, connect_server
from .cores import CoreTimeline, print_costs, write_svg
from .data import Dataset, Digest, Record, key_of, value_of
from .executors import ExecutorStarts, Watch, executor_starts, watch_executors
from .fetch import PeerUnavailable, maven_jars, peers_root, python_venv
from .jvm import HeapAfterGc, gc_log_option, heap_after_full_gc, read_gc_log
from .measure import Meter, cmdline, descendants, measure, rss_mib
from .options import add_subset_argument, parse_subset, positive_int, setting
from .profile import Profile, profiled
from .report import (
    fmt,
    machine_line,
    median,
    print_parts,
    print_ratios,
    print_results,
    print_runs,
    print_table,
    print_verification,
    ratios,
    same_partition_counts,
)
from .rounds import Results, Round, Run, Side, checked, interleave
from .spark import (
    PYTHON_ENV,
    Phase,
    driver_java_options,
    event_log_conf,
    kafka2pc_commit,
    now_ms,
    server_phases,
    spark_phases,
    spark_submit,
    summed,
    task_spans,
    timeline,
)
from .verify import Expected, Verification, verify_topic

__all__ = [
    "PYTHON_ENV",
    "Cluster",
    "ConnectServer",
    "CoreTimeline",
    "Dataset",
    "Digest",
    "ExecutorStarts",
    "Expected",
    "HeapAfterGc",
    "Meter",
    "PeerUnavailable",
    "Phase",
    "Profile",
    "Record",
    "Results",
    "Round",
    "Run",
    "Side",
    "Verification",
    "Watch",
    "add_cluster_arguments",
    "add_subset_argument",
    "checked",
    "cmdline",
    "connect_server",
    "descendants",
    "driver_java_options",
    "event_log_conf",
    "executor_starts",
    "fmt",
    "gc_log_option",
    "heap_after_full_gc",
    "interleave",
    "kafka2pc_commit",
    "key_of",
    "machine_line",
    "maven_jars",
    "measure",
    "median",
    "now_ms",
    "parse_subset",
    "peers_root",
    "positive_int",
    "print_costs",
    "print_parts",
    "print_ratios",
    "print_results",
    "print_runs",
    "print_table",
    "print_verification",
    "profiled",
    "python_venv",
    "ratios",
    "read_gc_log",
    "rss_mib",
    "same_partition_counts",
    "server_phases",
    "setting",
    "spark_phases",
    "spark_submit",
    "summed",
    "task_spans",
    "timeline",
    "value_of",
    "verify_topic",
    "watch_executors",
    "write_svg",
]
