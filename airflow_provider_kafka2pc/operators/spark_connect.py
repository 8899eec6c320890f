"""The prepare's Spark job on a Spark Connect server instead of spark-submit.

Kept for its import path: the run itself is :func:`..hooks.spark_connect.prepare_on_connect`,
which :class:`~..hooks.spark_job.SparkJobHook` calls for the prepare and a loss repair.
"""

from __future__ import annotations

from ..hooks.spark_connect import prepare_on_connect

__all__ = ["prepare_on_connect"]
