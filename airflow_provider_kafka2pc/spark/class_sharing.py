"""The prepare's driver JVM starts from an application class-data-sharing archive (AppCDS).

Why: a prepare's spark-submit JVM loads, parses and verifies some 21,500 classes, and that
was most of the 6.5 s Spark took to reach its first job where PyFlink takes 2.9 s
(docs/performance-startup.md). A JVM started from an archive of the classes an earlier run
loaded maps them instead (14,900 of them in the test's third run).

The first run on a machine leaves a trace in the cache; the second, finding it, writes
the archive as its JVM exits (``-XX:ArchiveClassesAtExit``, JDK 13+; Spark 4 needs Java
17); every later run maps it (``-XX:SharedArchiveFile``). Writing costs its run about 16 s,
once; a cache that does not outlive a run (a Kubernetes pod's) never gets past the trace.

The JVM checks an archive against its own runtime and class path, and runs without it
(a warning on stderr) when they differ. So that two configurations on one machine do not
keep refusing each other's archive, an archive is named by a digest of what it depends on:
the Java runtime, Spark's jars and the driver's extra class path.

An archive fails safe (docs/performance-startup.md, "When the archive is bad"): JDK 17
crashes on an archive shorter than it was written (SIGBUS) or with damaged content
(SIGSEGV), so each is checked against the size recorded when it was published and mapped
with ``-XX:+VerifySharedSpaces`` (the JVM checks its checksums and runs without it); an
archive the driver did not map is evicted after the run, and only a mapped one counts as
used.

Only a driver on this machine gets one (client deploy mode); off with
``KAFKA2PC_CLASS_SHARING=false`` or when the driver's Java options already choose
(``-Xshare``, ``SharedArchiveFile``, ``ArchiveClassesAtExit``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from ..errors import ConfigurationError
from .maven import cache_root, java_binary

log = logging.getLogger(__name__)

#: ``false`` (or ``0``, ``no``) turns the archive off.
SWITCH_ENV = "KAFKA2PC_CLASS_SHARING"
#: Spark's setting the options go into (in client mode: the spark-submit JVM's options).
DRIVER_OPTIONS = "spark.driver.extraJavaOptions"
#: The driver's own class path entries: part of the class path an archive is checked against.
DRIVER_CLASS_PATH = "spark.driver.extraClassPath"
#: Java options that mean the user already chose how classes are shared.
_CHOSEN = ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit", "AutoCreateSharedArchive")
#: JVM warnings to stderr, not stdout (the prepare's summary is its last stdout line), and
#: not the hundreds of "class not supported by CDS" lines a dump logs under ``cds``. A
#: refused archive is still said, under ``cds+dynamic``.
_LOGGING = ("-Xlog:disable", "-Xlog:all=warning:stderr", "-Xlog:cds=error:stderr")
#: An archive not used for this long is removed when another one is written.
UNUSED_FOR_S = 14 * 24 * 3600
#: Mapping options: the JVM checks the archive's checksums (some 0.1 s of CPU for 180 MB)
#: and runs without it when they fail, where damaged content would crash it.
_VERIFY = "-XX:+VerifySharedSpaces"
#: How the class-load log names a class the driver's archive (the top layer) supplied.
MAPPED_MARK = b"source: shared objects file (top)"
#: Characters the JVM's -Xlog option cannot take in a file name unquoted.
_LOG_PATH_UNSAFE = frozenset(':,"')
#: Evictions within :data:`UNUSED_FOR_S` after which an archive is not written again until
#: that long after the last: one rewrite after a bad archive, where a driver that always
#: refuses it (a heap of 32 GB or more has no compressed pointers, and JDK 17 then refuses,
#: silently, an archive a smaller driver wrote) would make another pay 16 s every other run.
GIVE_UP_AFTER = 2


def switched_on(env: str) -> bool:
    """False when the environment variable ``env`` says ``false`` (or ``0``, ``no``,
    ``off``); true when unset or anything else. The driver's options each have one."""
    return os.environ.get(env, "true").strip().lower() not in ("false", "0", "no", "off")


def enabled() -> bool:
    return switched_on(SWITCH_ENV)


def archive_dir() -> Path:
    return cache_root() / "class-sharing"


def java_home(java: str) -> Path:
    """The runtime ``java`` belongs to (``.../bin/java`` resolved through links)."""
    return Path(os.path.realpath(java)).parent.parent


def spark_home(spark_binary: str) -> Path:
    """Spark's home as spark-submit finds it: $SPARK_HOME, else where the (resolved)
    spark-submit sits."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home)
    found = shutil.which(spark_binary) or spark_binary
    return Path(os.path.realpath(found)).parent.parent


def spark_jars(spark_binary: str) -> Path:
    return spark_home(spark_binary) / "jars"


def defaults_file_value(spark_binary: str, key: str, properties_file: str | None = None) -> str:
    """``key`` in the properties file spark-submit reads (``properties_file``, else
    ``$SPARK_CONF_DIR/spark-defaults.conf``), or "". Why: a ``--conf`` replaces the file's
    value, so options added to the driver's must start from it, not drop it."""
    if properties_file:
        path = Path(properties_file)
    else:
        conf_dir = os.environ.get("SPARK_CONF_DIR")
        path = Path(conf_dir) if conf_dir else spark_home(spark_binary) / "conf"
        path = path / "spark-defaults.conf"
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return ""
    for line in lines:
        text = line.strip()
        if not text or text[0] in "#!":
            continue
        # Java properties: the key ends at the first blank, "=" or ":".
        end = next((i for i, c in enumerate(text) if c in " \t=:"), len(text))
        if text[:end] == key:
            return text[end:].lstrip(" \t").removeprefix("=").removeprefix(":").strip()
    return ""


def driver_options(
    conf: Mapping[str, str], spark_binary: str, properties_file: str | None = None
) -> str:
    """The driver's Java options spark-submit would use: ``conf``'s, else the properties
    file's. What options added to the driver's start from."""
    return conf.get(DRIVER_OPTIONS) or defaults_file_value(
        spark_binary, DRIVER_OPTIONS, properties_file
    )


def _stat(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return f"{path}:absent"
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


def archive_name(runtime: Path, jars: Path, class_path: str) -> str:
    """The archive's file name: a digest of the runtime's image, Spark's jars and the
    driver's extra class path (each file by path, size and modification time)."""
    parts = [_stat(runtime / "lib" / "modules"), _stat(runtime / "lib" / "server" / "classes.jsa")]
    if jars.is_dir():
        parts += sorted(_stat(jar) for jar in jars.iterdir())
    parts += [_stat(Path(entry)) for entry in class_path.split(os.pathsep) if entry]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]
    return f"spark-driver-{digest}.jsa"


def _quoted(option: str) -> str:
    """One option as Spark splits ``extraJavaOptions`` (whitespace, double quotes)."""
    return f'"{option}"' if any(c.isspace() for c in option) else option


class DriverArchive:
    """The driver's archive options for one run (:attr:`conf`); once the run has succeeded,
    :meth:`publish` puts in place the archive it wrote, or judges the one it mapped."""

    def __init__(
        self,
        conf: dict[str, str],
        writing: Path | None = None,
        final: Path | None = None,
        mapping: _Mapping | None = None,
    ) -> None:
        #: The run's Spark settings, the archive's options in the driver's Java options.
        self.conf = conf
        self._writing = writing
        self._final = final
        self._mapping = mapping

    def publish(self) -> None:
        """Put the archive this run wrote in place (a failed run's is never published), or
        judge the one it mapped: refreshed when the driver mapped it, evicted when not."""
        try:
            if self._mapping is not None:
                self._mapping.judge()
            self._put_in_place()
        except OSError as exc:  # the run succeeded: the cache is not worth failing it for
            log.warning("driver class archive not published or judged: %s", exc)

    def _put_in_place(self) -> None:
        writing, final = self._writing, self._final
        if writing is None or final is None or not writing.is_file():
            return
        size = writing.stat().st_size
        if size > 0:
            # The record first: a reader that finds the archive finds its record.
            record_size(final, size)
            os.replace(writing, final)
            _prune(final.parent, keep=final)


class _Mapping:
    """One run that maps ``final``: where its driver logs the classes it loads, and the
    archive as that run found it (so that a newer one is not evicted in its place)."""

    def __init__(self, final: Path, log: Path | None) -> None:
        self.final = final
        self.log = log
        self._identity = _identity(final)

    def options(self) -> list[str]:
        return [f"-XX:SharedArchiveFile={self.final}", _VERIFY]

    def log_options(self) -> list[str]:
        """The class-load log, to follow :data:`_LOGGING` (whose ``-Xlog:disable`` would
        turn it off): one file (the JVM rotates at 20 MB, which would leave the archive's
        lines in another), no decorations."""
        if self.log is None:
            return []
        return [f"-Xlog:class+load=info:file={self.log}:none:filecount=0"]

    def judge(self) -> None:
        """After a successful run: refresh the archive's last use if the driver mapped it,
        evict it if the driver refused it, leave it when the log cannot tell."""
        verdict = mapped(self.log) if self.log is not None else None
        if verdict is None or _identity(self.final) != self._identity:
            return
        if verdict:
            os.utime(self.final)  # its last use, for pruning
        else:
            evict(self.final)

    def close(self) -> None:
        if self.log is not None:
            self.log.unlink(missing_ok=True)


def mapped(log: Path) -> bool | None:
    """Whether the driver whose class-load log this is took classes from its archive: None
    when the log is missing or empty (the JVM did not start, or a later ``-Xlog:disable``
    turned the log off), so nothing is concluded.

    Why this log and not the JVM's warnings: JDK 17 says nothing at all when it refuses an
    empty or short file, a version it does not know (another JDK's archive), another build,
    a bad magic number or a heap without compressed pointers, and says the rest at different
    levels under different tags; what class came from where is the one statement it makes
    in every case. Nor by reading the archive's header here: its layout changes with each
    JDK, and the class path, the heap's pointers and the checksums are checked by the JVM
    only. Its ``cds`` log at ``info``
    would say more, but crashes JDK 17.0.15 on an archive shorter than its header. The log
    costs about 21,000 lines per driver, within the noise of its start.
    """
    seen_any, tail = False, b""
    try:
        with log.open("rb") as lines:
            while chunk := lines.read(1 << 20):
                seen_any = seen_any or bool(chunk.strip())
                if MAPPED_MARK in tail + chunk:
                    return True
                tail = chunk[-len(MAPPED_MARK) :]
    except OSError:
        return None
    return False if seen_any else None


def evict(final: Path) -> None:
    """Remove an archive the driver did not map (and its record), keep the trace so the next
    run writes a fresh one, and count the eviction (:data:`GIVE_UP_AFTER`)."""
    final.unlink(missing_ok=True)
    _record(final).unlink(missing_ok=True)
    refused = _refused(final)
    _write_atomically(refused, str(_evictions(final) + 1))
    _seen(final).touch()


def intact(final: Path) -> bool:
    """The archive has the size recorded when it was published. Why: JDK 17 maps the
    regions its header names and dies of SIGBUS touching one past a shorter file's end, and
    -XX:+VerifySharedSpaces does not help there (it reads the regions too). An archive
    without a record (written before records, or copied without it) is not trusted."""
    try:
        recorded = int(_record(final).read_text().strip())
        return final.stat().st_size == recorded
    except (OSError, ValueError):
        return False


def record_size(final: Path, size: int) -> None:
    """Record the size ``final`` is published with (:func:`intact` checks it)."""
    _write_atomically(_record(final), str(size))


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def _archive_for(
    conf: Mapping[str, str],
    spark_binary: str,
    deploy_mode: str | None = None,
    properties_file: str | None = None,
) -> tuple[Path | None, str]:
    """(the archive this driver would map, the user's driver options), or (None, ...) where
    no archive applies."""
    options = driver_options(conf, spark_binary, properties_file)
    try:
        runtime = java_home(java_binary()) if enabled() else None
    except ConfigurationError:  # no Java: spark-submit says so itself
        runtime = None
    if (
        runtime is None
        or (deploy_mode or "client") != "client"
        or any(chosen in options for chosen in _CHOSEN)
        # No base archive (a JDK built without one): a dynamic archive cannot be written.
        or not (runtime / "lib" / "server" / "classes.jsa").is_file()
    ):
        return None, options
    name = archive_name(runtime, spark_jars(spark_binary), conf.get(DRIVER_CLASS_PATH, ""))
    return archive_dir() / name, options


def _seen(final: Path) -> Path:
    """Left by a run that found no archive: the next run that finds it knows the cache
    outlives a run, and writes the archive."""
    return final.with_name(f".{final.stem}.seen")


def _record(final: Path) -> Path:
    """The archive's size as published (:func:`intact`)."""
    return final.with_name(f".{final.stem}.size")


def _refused(final: Path) -> Path:
    """How many times this archive was evicted, each less than :data:`UNUSED_FOR_S` after
    the one before (its date: the last eviction)."""
    return final.with_name(f".{final.stem}.refused")


def _evictions(final: Path) -> int:
    """Evictions of this archive, counted until :data:`UNUSED_FOR_S` pass without one.
    Not reset by a mapped run: two configurations refusing each other's archive map it in
    turns."""
    marker = _refused(final)
    try:
        if time.time() - marker.stat().st_mtime >= UNUSED_FOR_S:
            return 0
        return int(marker.read_text().strip())
    except (OSError, ValueError):
        return 0


def given_up(final: Path) -> bool:
    """Evicted :data:`GIVE_UP_AFTER` times (:func:`_evictions`): not written again until
    :data:`UNUSED_FOR_S` after the last eviction."""
    return _evictions(final) >= GIVE_UP_AFTER


def archive_for(conf: Mapping[str, str], spark_binary: str) -> Path | None:
    """The archive a client-mode driver with ``conf`` maps (whether or not it exists yet),
    or None where none applies."""
    return _archive_for(conf, spark_binary)[0]


def runs_until_mapped(conf: Mapping[str, str], spark_binary: str) -> int:
    """How many runs from now the driver is first started from its archive: 0 (it is, or no
    archive applies), 1 (the next run writes it) or 2 (the next one finds no trace yet, or
    evicts a bad archive; or later, after repeated evictions)."""
    final, _ = _archive_for(conf, spark_binary)
    if final is None:
        return 0
    if final.is_file():
        return 0 if intact(final) else 2
    return 1 if _seen(final).is_file() and not given_up(final) else 2


def _log_path(final: Path) -> Path | None:
    """Where the mapping run's driver logs its class loads; None where -Xlog could not
    take the path (the run is then not judged)."""
    path = final.parent / f".{final.name}.{uuid.uuid4().hex[:8]}.log.tmp"
    return None if _LOG_PATH_UNSAFE & set(str(path)) else path


@contextmanager
def driver_archive(
    conf: Mapping[str, str],
    spark_binary: str,
    *,
    deploy_mode: str | None = None,
    properties_file: str | None = None,
) -> Iterator[DriverArchive]:
    """``conf`` with the driver's archive options: map the archive when it exists and is
    intact; else, if an earlier run left its trace (the cache outlives a run), write it as
    the driver exits; else leave the trace and add nothing. What a run wrote and did not
    publish is removed; an archive not intact is evicted and this run adds nothing.

    Why the trace: writing costs its run about 16 s once (docs/performance-startup.md). A
    worker whose cache is gone after each task (a Kubernetes pod) would pay it every time
    and never gain; it never gets past leaving traces.

    :param properties_file: spark-submit's ``--properties-file``, if given: the driver's
        options there (else in ``spark-defaults.conf``) are kept after ours.
    """
    out = dict(conf)
    final, options = _archive_for(conf, spark_binary, deploy_mode, properties_file)
    try:
        plan = _plan(final) if final is not None else None
    except OSError as exc:  # an unwritable cache: the run goes on without an archive
        log.warning("driver class archive left out: %s", exc)
        plan = None
    if plan is None:
        yield DriverArchive(out)
        return
    first, writing, mapping = plan
    # Ours first: the user's own -Xlog options, after them, still apply.
    ours = [*first, *_LOGGING, *(mapping.log_options() if mapping else [])]
    out[DRIVER_OPTIONS] = " ".join([*map(_quoted, ours), options]).strip()
    try:
        yield DriverArchive(out, writing, final, mapping)
    finally:
        if writing is not None:
            writing.unlink(missing_ok=True)
        if mapping is not None:
            mapping.close()


def _plan(final: Path) -> tuple[list[str], Path | None, _Mapping | None] | None:
    """(this run's archive options, the archive it writes, the archive it maps), or None
    when it adds nothing (it leaves the trace, evicts a bad archive, or has given up)."""
    if final.is_file() and not intact(final):
        evict(final)
        return None
    if final.is_file():
        mapping = _Mapping(final, _log_path(final))
        return mapping.options(), None, mapping
    if _seen(final).is_file():
        if given_up(final):
            return None
        writing = final.parent / f".{final.name}.{uuid.uuid4().hex[:8]}.tmp"
        return [f"-XX:ArchiveClassesAtExit={writing}"], writing, None
    final.parent.mkdir(parents=True, exist_ok=True)
    _seen(final).touch()
    return None


def _prune(directory: Path, keep: Path) -> None:
    """Remove archives unused for :data:`UNUSED_FOR_S` (an upgraded JDK or Spark leaves its
    old archive behind; each is some 180 MB), with their records."""
    now = time.time()
    # A run killed while it wrote leaves its temporary file (a day is longer than any run).
    stale = [(p, now - UNUSED_FOR_S) for p in directory.glob("spark-driver-*.jsa")]
    stale += [(p, now - 24 * 3600) for p in directory.glob(".spark-driver-*.tmp")]
    stale += [(p, now - UNUSED_FOR_S) for p in directory.glob(".spark-driver-*.seen")]
    stale += [(p, now - UNUSED_FOR_S) for p in directory.glob(".spark-driver-*.refused")]
    for path, cutoff in stale:
        try:
            if path != keep and path.stat().st_mtime < cutoff:
                path.unlink()
        except OSError:
            pass
    # A record outlives its archive only when the archive was removed (a day: a record is
    # written just before its archive is renamed into place).
    for record in directory.glob(".spark-driver-*.size"):
        archive = record.with_name(f"{record.stem.removeprefix('.')}.jsa")
        try:
            if not archive.exists() and record.stat().st_mtime < now - 24 * 3600:
                record.unlink()
        except OSError:
            pass
