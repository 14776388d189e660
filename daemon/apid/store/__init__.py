"""Storage: the schema, the database handle that keeps SQL off the reactor, migrations, and
Redis for the counts several daemons share."""
