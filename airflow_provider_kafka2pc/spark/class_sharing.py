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

Only a driver on this machine gets one (client deploy mode); off with
``KAFKA2PC_CLASS_SHARING=false`` or when the driver's Java options already choose
(``-Xshare``, ``SharedArchiveFile``, ``ArchiveClassesAtExit``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from ..errors import ConfigurationError
from .maven import cache_root, java_binary

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


def enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "true").strip().lower() not in ("false", "0", "no", "off")


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
    """The driver's archive options for one run (:attr:`conf`), and the archive that run
    writes, which :meth:`publish` renames into place once the run has succeeded."""

    def __init__(self, conf: dict[str, str], writing: Path | None, final: Path | None) -> None:
        #: The run's Spark settings, the archive's options in the driver's Java options.
        self.conf = conf
        self._writing = writing
        self._final = final

    def publish(self) -> None:
        """Put the archive this run wrote in place (a failed run's is never published)."""
        writing, final = self._writing, self._final
        if writing is None or final is None or not writing.is_file():
            return
        if writing.stat().st_size > 0:
            os.replace(writing, final)
            _prune(final.parent, keep=final)


def _archive_for(
    conf: Mapping[str, str],
    spark_binary: str,
    deploy_mode: str | None = None,
    properties_file: str | None = None,
) -> tuple[Path | None, str]:
    """(the archive this driver would map, the user's driver options), or (None, ...) where
    no archive applies."""
    options = conf.get(DRIVER_OPTIONS) or defaults_file_value(
        spark_binary, DRIVER_OPTIONS, properties_file
    )
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


def runs_until_mapped(conf: Mapping[str, str], spark_binary: str) -> int:
    """How many runs from now the driver is first started from its archive: 0 (it is, or no
    archive applies), 1 (the next run writes it) or 2 (the next one finds no trace yet)."""
    final, _ = _archive_for(conf, spark_binary)
    if final is None or final.is_file():
        return 0
    return 1 if _seen(final).is_file() else 2


@contextmanager
def driver_archive(
    conf: Mapping[str, str],
    spark_binary: str,
    *,
    deploy_mode: str | None = None,
    properties_file: str | None = None,
) -> Iterator[DriverArchive]:
    """``conf`` with the driver's archive options: map the archive when it exists; else, if
    an earlier run left its trace (the cache outlives a run), write it as the driver exits;
    else leave the trace and add nothing. What a run wrote and did not publish is removed.

    Why the trace: writing costs its run about 16 s once (docs/performance-startup.md). A
    worker whose cache is gone after each task (a Kubernetes pod) would pay it every time
    and never gain; it never gets past leaving traces.

    :param properties_file: spark-submit's ``--properties-file``, if given: the driver's
        options there (else in ``spark-defaults.conf``) are kept after ours.
    """
    out = dict(conf)
    final, options = _archive_for(conf, spark_binary, deploy_mode, properties_file)
    if final is None:
        yield DriverArchive(out, None, None)
        return
    writing: Path | None = None
    if final.is_file():
        os.utime(final)  # its last use, for pruning
        first = f"-XX:SharedArchiveFile={final}"
    elif _seen(final).is_file():
        writing = final.parent / f".{final.name}.{uuid.uuid4().hex[:8]}.tmp"
        first = f"-XX:ArchiveClassesAtExit={writing}"
    else:
        final.parent.mkdir(parents=True, exist_ok=True)
        _seen(final).touch()
        yield DriverArchive(out, None, None)
        return
    # Ours first: the user's own -Xlog options, after them, still apply.
    out[DRIVER_OPTIONS] = " ".join([_quoted(first), *_LOGGING, options]).strip()
    try:
        yield DriverArchive(out, writing, final)
    finally:
        if writing is not None:
            writing.unlink(missing_ok=True)


def _prune(directory: Path, keep: Path) -> None:
    """Remove archives unused for :data:`UNUSED_FOR_S` (an upgraded JDK or Spark leaves its
    old archive behind; each is some 180 MB)."""
    now = time.time()
    # A run killed while it wrote leaves its temporary file (a day is longer than any run).
    stale = [(p, now - UNUSED_FOR_S) for p in directory.glob("spark-driver-*.jsa")]
    stale += [(p, now - 24 * 3600) for p in directory.glob(".spark-driver-*.tmp")]
    stale += [(p, now - UNUSED_FOR_S) for p in directory.glob(".spark-driver-*.seen")]
    for path, cutoff in stale:
        try:
            if path != keep and path.stat().st_mtime < cutoff:
                path.unlink()
        except OSError:
            pass
