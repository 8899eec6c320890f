"""Airflow UI plugins of the provider: the Kafka exports page (:mod:`.kafka_exports`).

An Airflow room above the hooks, like ``export`` and ``cli``: nothing below imports it.
"""
