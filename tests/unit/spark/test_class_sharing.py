"""spark/class_sharing.py: which Java options a driver gets, and when an archive is published.

The JVM's side (a written archive is mapped by the next run; a bad one never fails a run
and is evicted) is proven with real spark-submits in tests/integration/test_spark_prepare.py.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from airflow_provider_kafka2pc.spark import class_sharing
from airflow_provider_kafka2pc.spark.class_sharing import (
    DRIVER_OPTIONS,
    MAPPED_MARK,
    archive_name,
    driver_archive,
)


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Java runtime with a base archive, and the cache in tmp_path."""
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("")
    (home / "lib" / "server").mkdir(parents=True)
    (home / "lib" / "server" / "classes.jsa").write_bytes(b"base")
    (home / "lib" / "modules").write_bytes(b"modules")
    monkeypatch.setenv("JAVA_HOME", str(home))
    monkeypatch.setenv("KAFKA2PC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark"))
    monkeypatch.delenv(class_sharing.SWITCH_ENV, raising=False)
    (tmp_path / "spark" / "jars").mkdir(parents=True)
    (tmp_path / "spark" / "jars" / "spark-core.jar").write_bytes(b"jar")
    return home


def _options(conf: dict[str, str]) -> list[str]:
    return conf.get(DRIVER_OPTIONS, "").split()


def _first_run(conf: dict[str, str] | None = None) -> None:
    """The first run: it leaves its trace and adds nothing."""
    assert class_sharing.runs_until_mapped(conf or {}, "spark-submit") == 2
    with driver_archive(conf or {}, "spark-submit") as archive:
        assert archive.conf == (conf or {})
        archive.publish()
    assert class_sharing.runs_until_mapped(conf or {}, "spark-submit") == 1


def test_the_second_run_writes_the_archive_and_publishes_it_on_success(runtime: Path) -> None:
    _first_run()
    with driver_archive({}, "spark-submit") as archive:
        first = _options(archive.conf)[0]
        assert first.startswith("-XX:ArchiveClassesAtExit=")
        writing = Path(first.split("=", 1)[1])
        writing.write_bytes(b"archive")  # what the JVM writes as it exits
        archive.publish()
    published = list(class_sharing.archive_dir().glob("spark-driver-*.jsa"))
    assert [p.read_bytes() for p in published] == [b"archive"]
    assert not writing.exists()
    assert class_sharing.runs_until_mapped({}, "spark-submit") == 0

    with driver_archive({}, "spark-submit") as archive:
        assert _options(archive.conf)[0] == f"-XX:SharedArchiveFile={published[0]}"


def test_a_failed_run_publishes_nothing_and_leaves_nothing(runtime: Path) -> None:
    _first_run()
    with pytest.raises(RuntimeError), driver_archive({}, "spark-submit") as archive:
        writing = Path(_options(archive.conf)[0].split("=", 1)[1])
        writing.write_bytes(b"partial")
        raise RuntimeError("spark-submit failed")
    assert not list(class_sharing.archive_dir().glob("*.jsa"))
    assert not list(class_sharing.archive_dir().glob("*.tmp"))

    with driver_archive({}, "spark-submit") as archive:  # not published: written again
        assert _options(archive.conf)[0].startswith("-XX:ArchiveClassesAtExit=")


def test_the_users_java_options_follow_ours(runtime: Path) -> None:
    conf = {DRIVER_OPTIONS: "-Dx=1 -Xlog:gc:file=/tmp/gc.log"}
    _first_run(conf)
    with driver_archive(conf, "spark-submit") as archive:
        options = _options(archive.conf)
    assert options[1:4] == list(class_sharing._LOGGING)
    assert options[-2:] == ["-Dx=1", "-Xlog:gc:file=/tmp/gc.log"]
    assert conf == {DRIVER_OPTIONS: "-Dx=1 -Xlog:gc:file=/tmp/gc.log"}  # not changed


@pytest.mark.parametrize(
    ("conf", "deploy_mode", "switch"),
    [
        ({DRIVER_OPTIONS: "-Xshare:off"}, None, None),
        ({DRIVER_OPTIONS: "-XX:SharedArchiveFile=/opt/mine.jsa"}, None, None),
        ({}, "cluster", None),  # the driver runs elsewhere: the path means nothing there
        ({}, None, "false"),
    ],
)
def test_left_alone_when_the_user_chose_or_the_driver_is_remote(
    runtime: Path,
    monkeypatch: pytest.MonkeyPatch,
    conf: dict[str, str],
    deploy_mode: str | None,
    switch: str | None,
) -> None:
    if switch is not None:
        monkeypatch.setenv(class_sharing.SWITCH_ENV, switch)
    for _ in range(2):
        with driver_archive(conf, "spark-submit", deploy_mode=deploy_mode) as archive:
            assert archive.conf == conf
            archive.publish()
    assert not class_sharing.archive_dir().exists()


def test_a_runtime_without_a_base_archive_gets_none(runtime: Path) -> None:
    (runtime / "lib" / "server" / "classes.jsa").unlink()
    for _ in range(2):
        with driver_archive({}, "spark-submit") as archive:
            assert archive.conf == {}


def test_the_name_follows_the_runtime_the_jars_and_the_class_path(
    runtime: Path, tmp_path: Path
) -> None:
    jars = tmp_path / "spark" / "jars"
    name = archive_name(runtime, jars, "")
    assert name == archive_name(runtime, jars, "")
    assert archive_name(runtime, jars, str(tmp_path / "extra.jar")) != name
    (jars / "another.jar").write_bytes(b"jar")
    assert archive_name(runtime, jars, "") != name
    (runtime / "lib" / "modules").write_bytes(b"an upgraded runtime")
    assert archive_name(runtime, jars, str(tmp_path / "extra.jar")) != name


def test_publishing_prunes_archives_unused_for_two_weeks(runtime: Path) -> None:
    directory = class_sharing.archive_dir()
    directory.mkdir(parents=True)
    old, recent = directory / "spark-driver-old.jsa", directory / "spark-driver-recent.jsa"
    for path in (old, recent):
        path.write_bytes(b"x")
    weeks_ago = time.time() - class_sharing.UNUSED_FOR_S - 60
    os.utime(old, (weeks_ago, weeks_ago))
    _first_run()
    with driver_archive({}, "spark-submit") as archive:
        Path(_options(archive.conf)[0].split("=", 1)[1]).write_bytes(b"archive")
        archive.publish()
    assert not old.exists()
    assert recent.exists()


def test_a_path_with_spaces_is_one_option(runtime: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA2PC_CACHE_DIR", str(runtime.parent / "my cache"))
    _first_run()
    with driver_archive({}, "spark-submit") as archive:
        options = archive.conf[DRIVER_OPTIONS]
    assert options.startswith('"-XX:ArchiveClassesAtExit=')
    assert f"{runtime.parent / 'my cache'}" in options


def test_the_driver_options_of_spark_defaults_are_kept_after_ours(
    runtime: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``--conf`` replaces spark-defaults.conf's value: ours must start from it."""
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "# site settings\n"
        "spark.driver.memory  2g\n"
        "spark.driver.extraJavaOptions  -Djava.security.krb5.conf=/etc/krb5.conf -Dx=1\n"
    )
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    _first_run()
    with driver_archive({}, "spark-submit") as archive:
        options = _options(archive.conf)
    assert options[-2:] == ["-Djava.security.krb5.conf=/etc/krb5.conf", "-Dx=1"]
    # The job's own setting wins over the file, as spark-submit's --conf does.
    with driver_archive({DRIVER_OPTIONS: "-Dy=2"}, "spark-submit") as archive:
        assert _options(archive.conf)[-1] == "-Dy=2"
    # A file that already chooses how classes are shared: nothing added.
    (conf_dir / "spark-defaults.conf").write_text("spark.driver.extraJavaOptions=-Xshare:off\n")
    with driver_archive({}, "spark-submit") as archive:
        assert archive.conf == {}


def test_a_cache_gone_after_each_run_never_pays_for_writing(runtime: Path) -> None:
    """A worker whose cache does not outlive a task (a Kubernetes pod) only leaves traces."""
    import shutil

    for _ in range(3):
        _first_run()
        shutil.rmtree(class_sharing.archive_dir())


# -- a bad archive fails safe ------------------------------------------------------------


def _published(content: bytes = b"archive") -> Path:
    """An archive published by a run (the trace, then a written archive)."""
    _first_run()
    with driver_archive({}, "spark-submit") as archive:
        Path(_options(archive.conf)[0].split("=", 1)[1]).write_bytes(content)
        archive.publish()
    (final,) = class_sharing.archive_dir().glob("spark-driver-*.jsa")
    return final


def _class_log(archive: class_sharing.DriverArchive) -> Path:
    """Where the driver JVM of a mapping run logs its class loads."""
    (option,) = [o for o in _options(archive.conf) if o.startswith("-Xlog:class+load")]
    path, rest = option.split("file=", 1)[1].split(":", 1)
    assert rest == "none:filecount=0"  # one file: not rotated at 20 MB
    return Path(path)


def _a_month_ago(path: Path) -> float:
    then = time.time() - 30 * 24 * 3600
    os.utime(path, (then, then))
    return then


def test_a_mapped_archive_is_verified_and_counts_as_used_once_the_driver_mapped_it(
    runtime: Path,
) -> None:
    final = _published()
    then = _a_month_ago(final)
    with driver_archive({}, "spark-submit") as archive:
        options = _options(archive.conf)
        assert options[:2] == [f"-XX:SharedArchiveFile={final}", "-XX:+VerifySharedSpaces"]
        log = _class_log(archive)
        # After the logging options: their -Xlog:disable would turn it off.
        logging = [
            i for i, o in enumerate(options) if o.startswith(f"-Xlog:class+load=info:file={log}:")
        ]
        assert logging[0] > options.index("-Xlog:disable")
        assert final.stat().st_mtime == then  # not refreshed before the JVM says so
        log.write_bytes(b"[info][class,load] org.apache.spark.SparkContext " + MAPPED_MARK)
        archive.publish()
    assert final.stat().st_mtime > then + 3600
    assert not log.exists()


def test_an_archive_the_driver_refused_is_evicted_and_the_next_run_writes_afresh(
    runtime: Path,
) -> None:
    final = _published()
    with driver_archive({}, "spark-submit") as archive:
        # Refused: every class from the JDK's own archive or from the jars.
        _class_log(archive).write_bytes(
            b"[info][class,load] java.lang.Object source: shared objects file\n"
            b"[info][class,load] org.apache.spark.SparkContext source: file:/spark/x.jar\n"
        )
        archive.publish()
    assert not final.exists()
    assert not list(class_sharing.archive_dir().glob(".*.size"))
    assert class_sharing.runs_until_mapped({}, "spark-submit") == 1
    with driver_archive({}, "spark-submit") as archive:
        assert _options(archive.conf)[0].startswith("-XX:ArchiveClassesAtExit=")


def test_nothing_is_concluded_without_a_log_or_from_a_failed_run(runtime: Path) -> None:
    """An empty log (a later -Xlog:disable, a JVM that never started) or a failed run: the
    archive is neither evicted nor refreshed."""
    final = _published()
    then = _a_month_ago(final)
    with driver_archive({}, "spark-submit") as archive:
        _class_log(archive).write_bytes(b"")
        archive.publish()
    with pytest.raises(RuntimeError), driver_archive({}, "spark-submit") as archive:
        _class_log(archive).write_bytes(b"[info][class,load] java.lang.Object source: jrt:/")
        raise RuntimeError("spark-submit failed")
    assert final.stat().st_mtime == then
    assert not list(class_sharing.archive_dir().glob(".*.log.tmp"))


@pytest.mark.parametrize("damage", ["truncated", "grown", "unrecorded", "bad record"])
def test_an_archive_not_of_its_recorded_size_is_evicted_before_the_jvm_sees_it(
    runtime: Path, damage: str
) -> None:
    """JDK 17 dies of SIGBUS on a shorter archive: it is never handed over."""
    final = _published(b"x" * 1000)
    record = class_sharing.archive_dir() / f".{final.stem}.size"
    if damage == "truncated":
        final.write_bytes(b"x" * 500)
    elif damage == "grown":
        final.write_bytes(b"x" * 1500)
    elif damage == "unrecorded":  # published before records, or copied without it
        record.unlink()
    else:
        record.write_text("many")
    assert class_sharing.runs_until_mapped({}, "spark-submit") == 2
    with driver_archive({}, "spark-submit") as archive:
        assert archive.conf == {}  # this run goes without
        archive.publish()
    assert not final.exists()
    with driver_archive({}, "spark-submit") as archive:  # the trace is kept: written now
        assert _options(archive.conf)[0].startswith("-XX:ArchiveClassesAtExit=")


def _refused_run() -> None:
    with driver_archive({}, "spark-submit") as archive:
        _class_log(archive).write_bytes(b"[info][class,load] java.lang.Object source: jrt:/")
        archive.publish()


def _write_run(content: bytes = b"archive") -> None:
    with driver_archive({}, "spark-submit") as archive:
        Path(_options(archive.conf)[0].split("=", 1)[1]).write_bytes(content)
        archive.publish()


def test_an_archive_refused_again_after_its_rewrite_is_not_written_for_two_weeks(
    runtime: Path,
) -> None:
    """A configuration whose archive the JVM always refuses would pay 16 s every other run."""
    _published()
    _refused_run()
    _write_run()  # the one rewrite
    _refused_run()
    assert class_sharing.runs_until_mapped({}, "spark-submit") == 2
    for _ in range(2):
        with driver_archive({}, "spark-submit") as archive:
            assert archive.conf == {}
    marker = next(class_sharing.archive_dir().glob(".*.refused"))
    _a_month_ago(marker)
    with driver_archive({}, "spark-submit") as archive:
        assert _options(archive.conf)[0].startswith("-XX:ArchiveClassesAtExit=")


def test_evictions_count_until_two_weeks_pass_without_one(runtime: Path) -> None:
    """Not reset by a mapped run: a driver that always refuses the archive another maps
    (a heap without compressed pointers) would make that one rewrite it every other run."""
    final = _published()
    _refused_run()
    _write_run()
    with driver_archive({}, "spark-submit") as archive:  # the other configuration maps it
        _class_log(archive).write_bytes(MAPPED_MARK)
        archive.publish()
    _refused_run()
    assert not final.exists()
    assert class_sharing.runs_until_mapped({}, "spark-submit") == 2  # given up
    _a_month_ago(next(class_sharing.archive_dir().glob(".*.refused")))
    _write_run()
    _refused_run()  # one eviction in two weeks: written again
    assert class_sharing.runs_until_mapped({}, "spark-submit") == 1


def test_an_archive_replaced_during_the_run_is_not_evicted(runtime: Path) -> None:
    """Another run evicted and rewrote it meanwhile: that one is judged by its own run."""
    final = _published()
    with driver_archive({}, "spark-submit") as archive:
        _class_log(archive).write_bytes(b"[info][class,load] java.lang.Object source: jrt:/")
        fresh = final.with_name("fresh")
        fresh.write_bytes(b"a newer archive")
        os.replace(fresh, final)
        archive.publish()
    assert final.read_bytes() == b"a newer archive"


def test_a_cache_path_the_jvm_log_cannot_take_maps_without_a_verdict(
    runtime: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA2PC_CACHE_DIR", str(runtime.parent / "a:b"))
    final = _published()
    with driver_archive({}, "spark-submit") as archive:
        options = _options(archive.conf)
        archive.publish()
    assert options[0] == f"-XX:SharedArchiveFile={final}"
    assert not any(o.startswith("-Xlog:class+load") for o in options)
    assert final.exists()


def test_an_unwritable_cache_never_fails_a_run(runtime: Path, tmp_path: Path, monkeypatch) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    monkeypatch.setenv("KAFKA2PC_CACHE_DIR", str(blocked))
    with driver_archive({}, "spark-submit") as archive:
        assert archive.conf == {}
        archive.publish()


def test_publishing_never_fails_a_run_that_succeeded(
    runtime: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _first_run()

    def full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    with driver_archive({}, "spark-submit") as archive:
        Path(_options(archive.conf)[0].split("=", 1)[1]).write_bytes(b"archive")
        monkeypatch.setattr(class_sharing.os, "replace", full)
        archive.publish()
    assert not list(class_sharing.archive_dir().glob("spark-driver-*.jsa"))


def test_pruning_removes_records_of_archives_gone_for_a_day(runtime: Path) -> None:
    directory = class_sharing.archive_dir()
    directory.mkdir(parents=True)
    orphan, fresh = directory / ".spark-driver-gone.size", directory / ".spark-driver-new.size"
    for path in (orphan, fresh):
        path.write_text("1")
    _a_month_ago(orphan)
    final = _published()
    assert not orphan.exists()
    assert fresh.exists()  # its archive may be renamed into place just now
    assert (directory / f".{final.stem}.size").read_text() == str(len(b"archive"))


def test_the_verdict_reads_the_log_in_chunks(tmp_path: Path) -> None:
    """A driver's log is megabytes; the mark may straddle two reads."""
    log = tmp_path / "classes.log"
    log.write_bytes(b"x" * ((1 << 20) - 10) + MAPPED_MARK + b"\n")
    assert class_sharing.mapped(log) is True
    log.write_bytes(b"java.lang.Object source: shared objects file\n" * 50_000)
    assert class_sharing.mapped(log) is False
    log.write_bytes(b"\n")
    assert class_sharing.mapped(log) is None
    assert class_sharing.mapped(tmp_path / "absent.log") is None
