"""Alembic migrations of the ledger schema, run by ``Ledger.migrate()`` (not by the alembic CLI)."""
