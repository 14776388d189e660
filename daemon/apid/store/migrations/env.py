"""Alembic environment: online only, on the connection `apid.store.migrate` hands over."""

from alembic import context

from apid.store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
