"""The prepare's driver JVM gives its optimising compiler (C2) only the code that is hot.

Why: a prepare's JVM lives for one export, and HotSpot's defaults suit a server that runs
for hours: every method called some 5,000 times goes to C2, Spark's start-up and planning
included. In an 8M-row prepare in local mode (the driver runs the tasks), C2's compiler
thread took 11-16 s of the JVM's 37-53 s of CPU: more than the tasks writing the records
(docs/performance.md, "The JIT compiler"). With C2's thresholds raised (:data:`THRESHOLDS`),
the per-record code still reaches C2 within its first records, and most of the rest stays
with the quick compiler (C1): 11% less CPU at 8M rows, 19% less in a 200k-row prepare.

Added before the user's own driver options (those from ``spark-defaults.conf`` or the
``--properties-file`` included, as the class archive's are), so a user's value wins; not at
all when the driver's options already choose how HotSpot compiles (:data:`_CHOSEN`), or with
``KAFKA2PC_JIT_THRESHOLDS=false``. HotSpot's flags: a JVM that does not know them (OpenJ9)
ignores ``-XX`` options it does not recognise.
"""

from __future__ import annotations

from collections.abc import Mapping

from .class_sharing import DRIVER_OPTIONS, driver_options, switched_on

#: ``false`` (or ``0``, ``no``, ``off``) leaves the driver's compiler as HotSpot sets it.
SWITCH_ENV = "KAFKA2PC_JIT_THRESHOLDS"
#: C2's thresholds (HotSpot's defaults: 5,000 invocations, 600 with loops, 15,000 in all,
#: 40,000 back-edges), raised tenfold: measured side by side in docs/performance.md.
THRESHOLDS = (
    "-XX:Tier4InvocationThreshold=50000",
    "-XX:Tier4MinInvocationThreshold=6000",
    "-XX:Tier4CompileThreshold=60000",
    "-XX:Tier4BackEdgeThreshold=400000",
)
#: Option fragments that mean the user already chose how the driver compiles.
_CHOSEN = ("Tier", "CompileThreshold", "-Xint", "-Xcomp", "CompilationMode", "-XX:-UseCompiler")


def enabled() -> bool:
    return switched_on(SWITCH_ENV)


def with_compile_thresholds(
    conf: Mapping[str, str], spark_binary: str, properties_file: str | None = None
) -> dict[str, str]:
    """``conf`` with :data:`THRESHOLDS` before the driver's own options (``conf``'s, else
    the properties file's: a ``--conf`` replaces the file's value, so it must carry it)."""
    out = dict(conf)
    options = driver_options(conf, spark_binary, properties_file)
    if not enabled() or any(chosen in options for chosen in _CHOSEN):
        return out
    out[DRIVER_OPTIONS] = " ".join([*THRESHOLDS, options]).strip()
    return out
