"""Deterministic benchmark data: the same records, in the same files, for every system compared.

Why: a comparison means something only when every system writes the same bytes. Record
``i`` is a pure function of ``i`` (a 16-byte key, a JSON value of about 130 bytes), so the
records can be rebuilt anywhere (in this process, in a Spark task, in a producer) and an
order-independent digest of (key, value) pairs proves afterwards that an output holds
exactly the source: nothing lost, nothing twice, nothing changed.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy

from airflow_provider_kafka2pc.transaction.native_writer import partition_for_key

Record = tuple[bytes, bytes]

#: Where generated files are kept between runs (same rows and files: same bytes).
DATA_ROOT = Path("/tmp/kafka2pc-bench/data")

#: Rows per parquet row group, and per step of the generator.
ROW_GROUP = 1_000_000
_NOTE = b"abcdefghij" * 5  # pads the value to about 130 bytes
_MASK = (1 << 128) - 1


def key_of(i: int) -> bytes:
    """Record ``i``'s key: 16 bytes, unique."""
    return b"k%015d" % i


def value_of(i: int) -> bytes:
    """Record ``i``'s value: a JSON object of about 130 bytes."""
    return b'{"id":%d,"customer":"customer-%05d","amount":%d.%02d,"note":"%s-%07d"}' % (
        i,
        i % 9973,
        i * 3 // 2,
        i % 100,
        _NOTE,
        i % 10_000_000,
    )


_M = numpy.uint32(0x5BD1E995)
_SEED = numpy.uint32(0x9747B28C)


def partitions_of(start: int, stop: int, partitions: int) -> numpy.ndarray:
    """Java's partition (``toPositive(murmur2(key)) % n``) of the keys of records
    ``start .. stop-1``, computed on arrays: ``key_of(i)`` is ``k`` and 15 digits, so its
    four little-endian words are built from ``i``'s digits (the package's
    ``partition_for_key``, one key at a time in Python, takes some 10 us a key: 17
    minutes for 100M keys)."""
    ids = numpy.arange(start, stop, dtype=numpy.int64)
    digits = [(ids // 10**k % 10 + ord("0")).astype(numpy.uint32) for k in range(14, -1, -1)]
    key = [numpy.full(ids.shape, ord("k"), numpy.uint32), *digits]  # 16 bytes
    with numpy.errstate(over="ignore"):
        h = numpy.full(ids.shape, _SEED ^ numpy.uint32(16), numpy.uint32)
        for w in range(4):
            k = key[4 * w] | key[4 * w + 1] << 8 | key[4 * w + 2] << 16 | key[4 * w + 3] << 24
            k = k * _M
            k ^= k >> 24
            k = k * _M
            h = h * _M
            h ^= k
        h ^= h >> 13
        h = h * _M
        h ^= h >> 15
    return ((h & numpy.uint32(0x7FFFFFFF)) % numpy.uint32(partitions)).astype(numpy.int64)


def _check_placement(placed: numpy.ndarray, partitions: int) -> None:
    """The arrays agree with the package's partitioner on the first keys."""
    for i in range(min(len(placed), 10_000)):
        if placed[i] != partition_for_key(key_of(i), partitions):
            raise AssertionError(f"partitions_of disagrees with partition_for_key at key {i}")


@dataclass
class Digest:
    """Order-independent fingerprint of (key, value) pairs: their count and the sum of their
    hashes, so a lost, repeated or altered record changes it whichever order they came in."""

    count: int = 0
    total: int = 0

    def add(self, key: bytes | None, value: bytes | None) -> None:
        k = b"\xff" if key is None else b"\x00" + key
        h = hashlib.blake2b(len(k).to_bytes(4, "big") + k + (value or b""), digest_size=16)
        self.total = (self.total + int.from_bytes(h.digest(), "big")) & _MASK
        self.count += 1

    def add_all(self, records: Iterable[Record]) -> Digest:
        for key, value in records:
            self.add(key, value)
        return self

    def __str__(self) -> str:
        return f"{self.count:,} records, digest {self.total >> 64:016x}"


def digest_of(rows: int) -> Digest:
    """The digest of records ``0 .. rows-1``, a million at a time in as many processes as
    there are cores (a hash a record in Python: some 7 us; the digest is a sum, so the
    parts add up)."""
    chunks = [(start, min(rows, start + ROW_GROUP)) for start in range(0, rows, ROW_GROUP)]
    if len(chunks) < 2:
        return Digest().add_all(Dataset(rows).iter_records())
    digest = Digest()
    workers = min(len(chunks), os.cpu_count() or 1)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        for count, total in pool.map(_digest_range, *zip(*chunks, strict=True)):
            digest.count += count
            digest.total = (digest.total + total) & _MASK
    return digest


def _digest_range(start: int, stop: int) -> tuple[int, int]:
    part = Digest().add_all((key_of(i), value_of(i)) for i in range(start, stop))
    return part.count, part.total


@dataclass
class Dataset:
    """Records ``0 .. rows-1``; their digest and per-partition counts are computed once and
    kept on disk beside the parquet files."""

    rows: int
    _digest: Digest | None = field(default=None, repr=False)
    _counts: dict[int, tuple[int, ...]] = field(default_factory=dict, repr=False)

    def records(self, start: int = 0, stop: int | None = None) -> list[Record]:
        """Records ``start .. stop-1`` as a list (built before any timed section)."""
        return list(self.iter_records(start, stop))

    def iter_records(self, start: int = 0, stop: int | None = None) -> Iterator[Record]:
        for i in range(start, self.rows if stop is None else stop):
            yield key_of(i), value_of(i)

    @property
    def directory(self) -> Path:
        return DATA_ROOT / f"rows-{self.rows}"

    def digest(self) -> Digest:
        if self._digest is None:
            meta = self._meta()
            if "digest" not in meta:
                digest = digest_of(self.rows)
                meta["digest"] = [digest.count, digest.total]
                self._save_meta(meta)
            self._digest = Digest(*meta["digest"])
        return self._digest

    def partition_counts(self, partitions: int) -> tuple[int, ...]:
        """Records per Kafka partition where Java's partitioner (murmur2) puts each key:
        a million keys at a time through :func:`partitions_of` (checked against the
        package's ``partition_for_key`` on the first keys)."""
        if partitions not in self._counts:
            meta = self._meta()
            name = f"partition_counts_{partitions}"
            if name not in meta:
                counts = [0] * partitions
                for start in range(0, self.rows, ROW_GROUP):
                    stop = min(self.rows, start + ROW_GROUP)
                    placed = partitions_of(start, stop, partitions)
                    if start == 0:
                        _check_placement(placed, partitions)
                    for p, n in enumerate(numpy.bincount(placed, minlength=partitions)):
                        counts[p] += int(n)
                meta[name] = counts
                self._save_meta(meta)
            self._counts[partitions] = tuple(meta[name])
        return self._counts[partitions]

    def parquet(self, files: int) -> Path:
        """The records as ``files`` snappy parquet files (columns ``key``, ``value``: strings)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        target = self.directory / f"parquet-{files}"
        if (target / "_COMPLETE").exists():
            return target
        target.mkdir(parents=True, exist_ok=True)
        bounds = [self.rows * f // files for f in range(files + 1)]
        schema = pa.schema([("key", pa.string()), ("value", pa.string())])
        for f in range(files):
            # Written a row group at a time: memory stays flat however many rows (32M too).
            with pq.ParquetWriter(
                target / f"part-{f:05d}.parquet", schema, compression="snappy"
            ) as writer:
                for start in range(bounds[f], bounds[f + 1], ROW_GROUP):
                    stop = min(bounds[f + 1], start + ROW_GROUP)
                    keys = pa.array([key_of(i).decode() for i in range(start, stop)], pa.string())
                    values = pa.array([value_of(i).decode() for i in range(start, stop)])
                    writer.write_table(pa.table({"key": keys, "value": values}, schema=schema))
        (target / "_COMPLETE").write_text("")
        return target

    def read_through(self, files: int) -> int:
        """Read the parquet files once, so the first timed run does not pay for a cold page
        cache (the warm-up round reads a smaller dataset). Returns the bytes read."""
        read = 0
        for path in sorted(self.parquet(files).glob("*.parquet")):
            with path.open("rb") as handle:
                while chunk := handle.read(1 << 22):
                    read += len(chunk)
        return read

    @property
    def record_bytes(self) -> float:
        """Mean key + value size."""
        sample = range(0, self.rows, max(1, self.rows // 1000))
        return sum(len(key_of(i)) + len(value_of(i)) for i in sample) / len(sample)

    def _meta(self) -> dict[str, list[int]]:
        path = self.directory / "meta.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def _save_meta(self, meta: dict[str, list[int]]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / "meta.json.tmp"
        tmp.write_text(json.dumps(meta))
        tmp.replace(self.directory / "meta.json")
