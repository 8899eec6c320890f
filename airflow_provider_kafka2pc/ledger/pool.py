"""The transactional-id pool: each prefix belongs to one export; ids ``<prefix>-<slot>``.

A batch leases the lowest free slots of its prefix (new slots only when none is free)
and gives them back when it finishes, so the distinct ids an export ever uses stay at
partitions x concurrent runs instead of growing with every run (the broker keeps each id
for ``transactional.id.expiration.ms``). All functions run in the caller's transaction.
"""

from __future__ import annotations

from sqlalchemy import Connection, false, func, insert, or_, select, update

from .. import naming
from ..errors import ConflictError, PrefixOwnedError
from .database import LOCK_PREFIXES, advisory_lock
from .schema import leases, now, prefixes


def claim_prefix(conn: Connection, export_id: str, id_prefix: str) -> None:
    """Register ``id_prefix`` for ``export_id`` (once) and lock it, serialising its leases.

    Refused when another export owns it, or when one prefix is the other plus "-...":
    their ids would then match each other's prefix filter on the broker.
    """
    owned = select(prefixes.c.export_id).where(prefixes.c.id_prefix == id_prefix)
    owner = conn.execute(owned.with_for_update()).scalar()
    if owner is None:
        advisory_lock(conn, LOCK_PREFIXES)  # one registration at a time; then look again
        owner = conn.execute(owned.with_for_update()).scalar()
    if owner == export_id:
        return
    if owner is not None:
        raise PrefixOwnedError(
            f"id_prefix {id_prefix!r} belongs to export {owner!r}; "
            f"give export {export_id!r} a prefix of its own"
        )
    parts = id_prefix.split("-")
    shorter = ["-".join(parts[:i]) for i in range(1, len(parts))]
    longer = prefixes.c.id_prefix.startswith(id_prefix + "-", autoescape=True)
    clash = conn.execute(
        select(prefixes)
        .where(or_(prefixes.c.id_prefix.in_(shorter), longer))
        .order_by(prefixes.c.id_prefix)
        .limit(1)
    ).first()
    if clash is not None:
        raise PrefixOwnedError(
            f"id_prefix {id_prefix!r} overlaps {clash.id_prefix!r} of export "
            f"{clash.export_id!r}: one's transactional ids would match the other's prefix"
        )
    conn.execute(
        insert(prefixes).values(id_prefix=id_prefix, export_id=export_id, created_at=now())
    )


def lease(conn: Connection, export_id: str, run_key: str, id_prefix: str, n: int) -> list[str]:
    """Lease ``n`` ids, lowest slot first; the caller holds the prefix (:func:`claim_prefix`)."""
    pool = leases.c
    lowest_free = (
        select(pool.slot)
        .where(pool.id_prefix == id_prefix, pool.leased == false())
        .order_by(pool.slot)
        .limit(n)
    )
    free = list(conn.scalars(lowest_free))
    holder = {"export_id": export_id, "run_key": run_key, "leased": True, "leased_at": now()}
    if free:
        taken = conn.execute(
            update(leases)
            .where(pool.id_prefix == id_prefix, pool.slot.in_(free), pool.leased == false())
            .values(**holder)
        ).rowcount
        if taken != len(free):
            raise ConflictError(f"id pool {id_prefix!r} changed while leasing; retry")
    top = conn.execute(select(func.max(pool.slot)).where(pool.id_prefix == id_prefix)).scalar()
    start = 0 if top is None else top + 1
    new = list(range(start, start + n - len(free)))
    if new:
        slots = [
            {"id_prefix": id_prefix, "slot": s, "transactional_id": naming.build(id_prefix, s)}
            for s in new
        ]
        conn.execute(insert(leases), [{**slot, **holder} for slot in slots])
    return [naming.build(id_prefix, s) for s in sorted([*free, *new])]


def release(conn: Connection, export_id: str, run_key: str) -> int:
    """Give a finished batch's ids back to the pool; returns how many."""
    return conn.execute(
        update(leases)
        .where(leases.c.export_id == export_id, leases.c.run_key == run_key)
        .values(leased=False, export_id=None, run_key=None, leased_at=None)
    ).rowcount
