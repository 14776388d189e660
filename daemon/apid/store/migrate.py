"""Bringing a database to the schema this build expects (Alembic, no alembic.ini needed).

Several daemons may start at once against one PostgreSQL: the upgrade holds an advisory
lock so that only one of them migrates and the others wait, then find nothing to do.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import Engine, text

MIGRATION_LOCK = 0x61706964  # "apid"


def _alembic_config() -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", "apid.store:migrations")
    return config


def ensure_sqlite_folder(url: str) -> None:
    prefix = "sqlite:///"
    if url.startswith(prefix) and url != prefix + ":memory:":
        Path(url[len(prefix):]).parent.mkdir(parents=True, exist_ok=True)


def upgrade(engine: Engine) -> None:
    """Apply every migration not yet applied; running it again changes nothing."""
    config = _alembic_config()
    with engine.connect() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK})
            connection.commit()
        try:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
            connection.commit()
        finally:
            if connection.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK})
                connection.commit()
