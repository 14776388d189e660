"""Alembic revisions of apid-directory, run by `apid migrate` after apid's own."""
