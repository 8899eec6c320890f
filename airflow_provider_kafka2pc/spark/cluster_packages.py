"""Spark packages for the executors of a driver in standalone cluster deploy mode.

spark-submit leaves a standalone cluster-mode submission's ``--packages``
(``spark.jars.packages``) to the driver's launcher on the worker (Spark's
``DriverWrapper``), which resolves them onto the driver's class path only; ``spark.jars``,
the list every executor fetches, never names them. The driver then builds a plan with a
package's class (Spark's ``to_avro`` for a registry Avro format) and each executor fails
to deserialise its task: ``ClassCastException: cannot assign instance of
scala.collection.generic.DefaultSerializationProxy``, the ``ClassNotFoundException``
behind it hidden by Scala's collection proxy. In client mode, on YARN and on Kubernetes
spark-submit resolves the packages itself into ``spark.jars``, so nothing is needed there.

The driver hands them to its executors as ``ivy://`` jars (``SparkContext.addJar``,
resolved with the same Ivy settings, from the cache ``DriverWrapper`` just filled).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)


def ivy_uris(conf: Mapping[str, str]) -> list[str]:
    """The ``ivy://`` URIs of the packages a standalone cluster-mode driver must hand to its
    executors (none in any other mode)."""
    if conf.get("spark.submit.deployMode") != "cluster":
        return []
    if not conf.get("spark.master", "").startswith("spark://"):
        return []
    excludes = ",".join(_listed(conf.get("spark.jars.excludes", "")))
    query = f"?transitive=true&exclude={excludes}" if excludes else "?transitive=true"
    return [f"ivy://{package}{query}" for package in _listed(conf.get("spark.jars.packages", ""))]


#: The applications whose packages were handed on (a second ``addJar`` of a jar only warns).
_shared: set[str] = set()


def share_with_executors(spark: Any) -> list[str]:
    """Add a classic session's packages to what its executors fetch, in standalone cluster
    deploy mode (a no-op elsewhere, and for an application already done); the URIs added."""
    context = spark.sparkContext
    if context.applicationId in _shared:
        return []
    uris = ivy_uris(dict(context.getConf().getAll()))
    for uri in uris:
        context._jsc.sc().addJar(uri)
    _shared.add(context.applicationId)
    if uris:
        log.info("packages handed to the executors (standalone cluster deploy mode): %s", uris)
    return uris


def _listed(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]
