"""A migrated database to start a test daemon from: `apid migrate` costs most of a second each
time an `ApidDaemon` starts, and does the same each time. The first daemon of a set of
migrations migrates as before and its database is kept (`keep`); the next ones start from a
copy (`restore`). The copy is named by a digest of apid's version and of every revision file
that would run, so a changed or added revision makes a new one; it is kept in the system's
temporary folder, for the life of the machine's tmp.

Only a database apid's kit chose (SQLite under the deployment) of a daemon running this
interpreter's apid is prepared so: another interpreter may hold other plugins, and a database
the test names is the test's.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import tempfile
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import apid.store

if TYPE_CHECKING:
    from apid.auth.passwords import Hashing

TEMPLATES = Path(tempfile.gettempdir()) / "apid-testing-templates"


def template_for(plugins: Iterable[str]) -> Path:
    """Where the migrated database of apid's and these plugins' revisions (all installed ones
    when none is named, as `loadPlugins`) is kept."""
    from apid.plugin_host.migrations import migration_sources

    folders = [Path(apid.store.__file__).parent / "migrations"]
    return template_of([*folders, *(source.folder for source in migration_sources(only=tuple(plugins)))])


def template_of(folders: Iterable[Path]) -> Path:
    """Where the database these revision folders make is kept: named by apid's version and
    every revision file's path and bytes."""
    digest = hashlib.blake2b(metadata.version("apid").encode(), digest_size=16)
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            digest.update(f"{path.relative_to(folder.parent)}\0".encode())
            digest.update(path.read_bytes())
    return TEMPLATES / f"{digest.hexdigest()}.db"


def restore(template: Path, database: Path) -> bool:
    """`database` made a copy of `template`; False when there is no template yet."""
    try:
        _copy(template, database)
    except sqlite3.OperationalError:  # none yet
        database.unlink(missing_ok=True)
        return False
    return True


def keep(database: Path, template: Path) -> None:
    """`database`, just migrated, kept as `template` (written aside, then renamed: a daemon
    starting meanwhile in another process copies a whole one or none)."""
    template.parent.mkdir(parents=True, exist_ok=True)
    aside = template.with_name(f"{template.stem}.{os.getpid()}.tmp")
    _copy(database, aside)
    aside.replace(template)


def _copy(source: Path, target: Path) -> None:
    """SQLite's own copy: whole, its write-ahead log included; the source opened read-only,
    so that one gone meanwhile is an error, not an empty database made in its place."""
    reading = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    writing = sqlite3.connect(target)
    try:
        reading.backup(writing)
    finally:
        reading.close()
        writing.close()


def add_accounts(
    database: Path, accounts: Iterable[tuple[str, str, str, Iterable[str]]], hashing: Hashing
) -> list[int]:
    """The accounts made in `database` as `apid user add` makes them before a daemon serves
    (checked by the account policy, the password hashed), in this process: a command each
    costs half a second. No webhook can hear of them yet: the database is new. Each is
    (username, email, password, roles), their passwords hashed by `hashing`; their ids."""
    from apid.auth.accounts import insert_account
    from apid.config.account_policy import check_credentials
    from apid.iostate.types import value_type
    from apid.store.database import make_engine, run_write

    engine = make_engine(f"sqlite:///{database}")
    try:
        made = []
        for username, email, password, roles in accounts:
            value_type("Email").check(email)
            check_credentials(username, password)
            made.append(run_write(engine, insert_account, username, email, hashing.hash(password), roles).id)
        return made
    finally:
        engine.dispose()
