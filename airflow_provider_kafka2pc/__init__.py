"""Exactly-once export from Spark into Apache Kafka by two-phase commit, run from Airflow."""

__version__ = "0.1.0"
