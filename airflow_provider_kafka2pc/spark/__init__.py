"""Spark prepare phase: every Spark partition becomes one prepared Kafka transaction.

Needs the ``spark`` extra (pyspark, pyarrow). :data:`APPLICATION` is the spark-submit
application's file path, for ``SparkSubmitOperator(application=APPLICATION, ...)``;
importing it does not import pyspark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

APPLICATION = str(Path(__file__).with_name("app.py"))

__all__ = ["APPLICATION", "PrepareError", "Repair", "prepare_dataframe"]


def __getattr__(name: str) -> Any:
    if name == "PrepareError":
        from ..errors import PrepareError

        return PrepareError
    if name in ("prepare_dataframe", "Repair"):
        from . import prepare

        return getattr(prepare, name)
    raise AttributeError(name)
