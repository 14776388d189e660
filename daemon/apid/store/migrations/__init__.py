"""apid's own Alembic revisions (`versions/`), and the env.py that runs them and every plugin's
(`apid.store.migrate` says how)."""
