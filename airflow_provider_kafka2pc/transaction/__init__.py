"""Transaction machinery: writer, committable, controller, audit. Free of Airflow imports."""
