"""Storage: the schema, the database handle that keeps SQL off the reactor, and migrations."""
