"""Resolving an export's dangling transactions, free of Airflow.

Two witnesses say what dangles. The ledger knows the in-doubt batches and their verdicts;
the broker knows which transactions are really open under the export's transactional-id
prefix (an open transaction holds back every read_committed consumer of the partitions it
touched, so one the ledger forgot is an outage too). Each open transaction is resolved by
the verdict of the batch that holds its id:

* COMMIT verdict: committed with the stored producer id and epoch of its committable. An
  open transaction under that id with another producer id/epoch is not the committable's
  (that one has already ended: an id has one open transaction at a time): it is fenced.
* ABORT verdict, or none once the batch is stale (unchanged for the grace period, or past
  its earliest transaction timeout): aborted, then fenced, so a zombie writer cannot go on.
* A pooled id back in the pool (its last batch finished, no run leases it): fenced at once.
  Whatever is open there opened after its batch ended (a late-opening task of a failed job,
  a zombie executor), so no run can own it.
* No ledger record at all (an id under the prefix that the pool never handed out): fenced
  once it has been open for the grace period; InitProducerId aborts whatever the id left open.

A live run (its batch changed within the grace period, or its transaction younger than
that) is never touched: it is reported as left. Which batches to touch is a rule
(:mod:`.rules`), kept apart from the doing (:mod:`.rounds`), so a dry run
reports exactly what a real run would do.
"""

from .discovery import Discovery, OpenTransaction, discover
from .report import RecoveryReport
from .rounds import check_ownership, export_prefixes, recover

__all__ = [
    "Discovery",
    "OpenTransaction",
    "RecoveryReport",
    "check_ownership",
    "discover",
    "export_prefixes",
    "recover",
]
