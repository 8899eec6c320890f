"""CI's check that the committed jar is the one jvm/src builds: rebuild it, compare.

    python jvm/check.py [python]   (python: the interpreter jvm/build.sh compiles against)

The jar is committed (users need no JDK), so a source changed without a rebuild, or a jar
built from sources never committed, would ship unnoticed. This builds the jar afresh with
``jvm/build.sh`` into a temporary file and compares it with the committed one entry by
entry: the same names, and the same bytes once unpacked. Not the archive's own bytes:
the deflated bytes depend on the zlib the JDK links, and the manifest's ``Created-By`` on
the JDK's build, neither of which changes what runs. Exit status 1, with what differs and
how to fix it, when they do not match.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "airflow_provider_kafka2pc" / "spark" / "jars" / "kafka2pc-spark.jar"
MANIFEST = "META-INF/MANIFEST.MF"


def entries(jar: Path) -> dict[str, bytes]:
    """Each entry's unpacked bytes; the manifest without the JDK's ``Created-By`` line."""
    with zipfile.ZipFile(jar) as archive:
        found = {name: archive.read(name) for name in archive.namelist()}
    if MANIFEST in found:
        lines = found[MANIFEST].decode().replace("\r\n", "\n").split("\n")
        found[MANIFEST] = "\n".join(x for x in lines if not x.startswith("Created-By:")).encode()
    return found


def differences(committed: Path, built: Path) -> list[str]:
    """What differs between the two jars, one line per entry; empty when they match."""
    old, new = entries(committed), entries(built)
    lines = [f"only in the fresh build: {name}" for name in sorted(new.keys() - old.keys())]
    lines += [f"only in the committed jar: {name}" for name in sorted(old.keys() - new.keys())]
    lines += [
        f"differs: {name}" for name in sorted(old.keys() & new.keys()) if old[name] != new[name]
    ]
    return lines


def main(argv: list[str]) -> int:
    python = argv[0] if argv else sys.executable
    with tempfile.TemporaryDirectory(prefix="kafka2pc-jar-") as work:
        built = Path(work) / "kafka2pc-spark.jar"
        subprocess.run(["bash", str(REPO / "jvm" / "build.sh"), python, str(built)], check=True)
        found = differences(COMMITTED, built)
    if found:
        print(
            f"{COMMITTED.relative_to(REPO)} is stale: it is not what jvm/src builds "
            f"(javac {_javac()}):\n  " + "\n  ".join(found) + "\nRun jvm/build.sh and commit "
            "the jar (built with JDK 17, as CI does).",
            file=sys.stderr,
        )
        return 1
    print(f"{COMMITTED.relative_to(REPO)} matches jvm/src")
    return 0


def _javac() -> str:
    done = subprocess.run(["javac", "-version"], capture_output=True, text=True)
    return (done.stdout or done.stderr).strip().removeprefix("javac ")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
