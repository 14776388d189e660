"""The directory's Alembic revision files: only these, apid's own env.py runs them.

`metadata` names the tables they make, as `apid_directory.store` declares them: `apid migrate
--generate directory` compares it with the database to write the next revision here."""

from apid_directory.store import metadata

__all__ = ["metadata"]
