"""Rows with typed columns, for benchmarks where the value's encoding is what is compared.

Why not :class:`.data.Dataset`: its value is a JSON string already, so every encoding of
it is a string. Here each row has a long, strings, an int, a double, a boolean, a
timestamp, a date and a nullable string, so that a JSON rendering of the row and an Avro
record of it carry the same typed fields. Row ``i`` is a pure function of ``i``
(:func:`row_of`), its key is the harness' ``key_of(i)`` (so Java's placement, and the
per-partition counts kept by :class:`.data.Dataset`, are the same), and a decoded value is
compared field by field with it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .data import DATA_ROOT, ROW_GROUP, Dataset, key_of

#: Beside the harness' own data (``/tmp/kafka2pc-bench/wire-data``).
TYPED_ROOT = DATA_ROOT.parent / "wire-data"
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
FIRST_DAY = dt.date(2026, 1, 1)
_EPOCH_MS = int(EPOCH.timestamp() * 1000)
_NOTE = "abcdefghij" * 3


def row_of(i: int) -> dict[str, Any]:
    """Row ``i`` as a decoder gives it back (a null ``note`` every third row)."""
    return {
        "id": i,
        "key": key_of(i).decode(),
        "customer": f"customer-{i % 9973:05d}",
        "quantity": i % 1000,
        "amount": (i * 3 // 2) + (i % 100) / 100,
        "active": i % 2 == 0,
        "created": EPOCH + dt.timedelta(milliseconds=i * 1001),
        "day": FIRST_DAY + dt.timedelta(days=i % 3650),
        "note": None if i % 3 == 0 else f"{_NOTE}-{i % 10_000_000:07d}",
    }


def from_json(value: dict[str, Any]) -> dict[str, Any]:
    """A row parsed from Spark's ``to_json`` as :func:`row_of` gives it: the timestamp and
    the date from their ISO text, a null ``note`` (left out by ``to_json``) as None."""
    row = dict(value)
    if isinstance(row.get("created"), str):
        row["created"] = dt.datetime.fromisoformat(row["created"])
    if isinstance(row.get("day"), str):
        row["day"] = dt.date.fromisoformat(row["day"])
    row.setdefault("note", None)
    return row


@dataclass
class TypedDataset:
    """Rows ``0 .. rows-1`` as parquet files of typed columns, generated once and kept."""

    rows: int

    @property
    def directory(self) -> Path:
        return TYPED_ROOT / f"rows-{self.rows}"

    def partition_counts(self, partitions: int) -> tuple[int, ...]:
        """Records per Kafka partition (Java's murmur2 of ``key_of(i)``, as in the harness'
        dataset of as many rows: computed once, kept beside its files)."""
        return Dataset(self.rows).partition_counts(partitions)

    def parquet(self, files: int) -> Path:
        """The rows as ``files`` snappy parquet files, written a row group at a time."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        target = self.directory / f"parquet-{files}"
        if (target / "_COMPLETE").exists():
            return target
        target.mkdir(parents=True, exist_ok=True)
        bounds = [self.rows * f // files for f in range(files + 1)]
        schema = pa.schema(
            [
                ("id", pa.int64()),
                ("key", pa.string()),
                ("customer", pa.string()),
                ("quantity", pa.int32()),
                ("amount", pa.float64()),
                ("active", pa.bool_()),
                ("created", pa.timestamp("ms", tz="UTC")),
                ("day", pa.date32()),
                ("note", pa.string()),
            ]
        )
        first_day = (FIRST_DAY - dt.date(1970, 1, 1)).days
        for f in range(files):
            with pq.ParquetWriter(
                target / f"part-{f:05d}.parquet", schema, compression="snappy"
            ) as writer:
                for start in range(bounds[f], bounds[f + 1], ROW_GROUP):
                    stop = min(bounds[f + 1], start + ROW_GROUP)
                    ids = np.arange(start, stop, dtype=np.int64)
                    columns = {
                        "id": ids,
                        "key": [key_of(i).decode() for i in range(start, stop)],
                        "customer": [f"customer-{i % 9973:05d}" for i in range(start, stop)],
                        "quantity": (ids % 1000).astype(np.int32),
                        # The same IEEE operations as row_of: the same doubles.
                        "amount": (ids * 3 // 2) + (ids % 100) / 100,
                        "active": ids % 2 == 0,
                        "created": _EPOCH_MS + ids * 1001,
                        "day": (first_day + ids % 3650).astype(np.int32),
                        "note": [
                            None if i % 3 == 0 else f"{_NOTE}-{i % 10_000_000:07d}"
                            for i in range(start, stop)
                        ],
                    }
                    arrays = [pa.array(columns[f.name], f.type) for f in schema]
                    writer.write_table(pa.Table.from_arrays(arrays, schema=schema))
        (target / "_COMPLETE").write_text("")
        return target

    def read_through(self, files: int) -> int:
        """Read the files once (page cache) before the first timed run; bytes read."""
        read = 0
        for path in sorted(self.parquet(files).glob("*.parquet")):
            with path.open("rb") as handle:
                while chunk := handle.read(1 << 22):
                    read += len(chunk)
        return read
