"""Alembic environment, on the connection `apid.store.migrate` hands over (or offline, writing
the SQL out), for apid's revisions or a plugin's, each schema with its own version table. Generating a plugin's
revision compares the tables it declares (`metadata` and `owned` handed over) with the
database, and none but them: apid's tables and other plugins' are no part of its schema."""

from alembic import context

from apid.store.tables import metadata

attributes = context.config.attributes
tables = attributes.get("metadata", metadata)
owned = attributes.get("owned", frozenset(tables.tables))
version_table = attributes.get("version_table", "alembic_version")
if context.is_offline_mode():  # `apid migrate --plan --sql`: the SQL written out for the database's dialect
    context.configure(dialect_name=attributes["dialect"], literal_binds=True, version_table=version_table)
else:
    context.configure(
        connection=attributes["connection"],
        target_metadata=tables,
        version_table=version_table,
        # what autogenerate writes: batch operations, which SQLite needs and PostgreSQL runs as plain ALTERs
        render_as_batch=True,
        include_name=lambda name, kind, _: kind != "table" or name in owned,
        include_object=lambda _, name, kind, *__: kind != "table" or name in owned,
    )
with context.begin_transaction():
    context.run_migrations()
