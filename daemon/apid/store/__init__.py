"""Storage: the schema, the database handle that keeps SQL off the reactor, migrations (apid's and
the plugins'), and Redis for the counts several daemons share."""
