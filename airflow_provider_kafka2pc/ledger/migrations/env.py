"""Alembic environment: runs on the connection (and transaction) ``Ledger.migrate()`` passes in."""

from alembic import context

from airflow_provider_kafka2pc.ledger.schema import VERSION_TABLE, metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "the kafka2pc ledger migrates itself: use airflow_provider_kafka2pc.ledger.Ledger(url)"
    )
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
