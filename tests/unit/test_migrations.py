"""The migrations build exactly the schema of apid.store.tables, and running them twice is harmless."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from apid.store.migrate import upgrade
from apid.store.tables import metadata


def test_migrations_match_the_tables(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    upgrade(engine)
    upgrade(engine)
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), metadata)
    assert differences == []
    assert set(inspect(engine).get_table_names()) == {
        "alembic_version", "person", "role", "person_role", "hook", "hook_message", "hook_attempt", "account_token",
        "refresh_token", "revoked_token"}
