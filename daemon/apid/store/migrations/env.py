"""Alembic environment: online only, on the connection `apid.store.migrate` hands over, for
apid's revisions or a plugin's, each schema with its own version table."""

from alembic import context

from apid.store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=context.config.attributes.get("version_table", "alembic_version"),
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
