"""Finding the account of a login against the number of accounts (section `logins` of
scripts/bench, issue 25): `apid.auth.accounts.find_login`, the unit of work `/authenticate` runs
before it verifies the password, on databases of 1,000 and 100,000 accounts, SQLite and (when
Debian's PostgreSQL is installed, as for the tests) PostgreSQL; beside it, the lookup before
issue 25 (lower(username), which no index serves), for contrast.

Argon2 aside: the accounts' hashes are a placeholder and nothing is verified. The Argon2id
verification every login makes costs the same whatever the number of accounts, and hundreds
of times what is measured here, so a whole `/authenticate` would hide what the count changes.
"""

from __future__ import annotations

import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Connection, Engine, func, insert, select, text

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from apid.auth.accounts import email_key, find_login, username_key  # noqa: E402
from apid.store.database import make_engine, run_read  # noqa: E402
from apid.store.migrate import upgrade  # noqa: E402
from apid.store.tables import person, person_role, role  # noqa: E402

COUNTS = (1_000, 100_000)
SECONDS = 2.0  # timed per lookup and database, at least MIN_CALLS calls
MIN_CALLS = 20
EXPLAIN = {"sqlite": "EXPLAIN QUERY PLAN ", "postgresql": "EXPLAIN "}


def _before_issue_25(connection: Connection, username: str) -> object:
    """The statement login ran before person.username_key, lower() of every row's name (the
    row alone: find_login also reads the account's roles, by an index, after it)."""
    return connection.execute(
        select(person)
        .where(func.lower(person.c.username) == username.lower())
        .order_by((person.c.username == username).desc(), person.c.id)
    ).first()


def _fill(engine: Engine, count: int) -> None:
    """`count` accounts with a role each, as apid stores them, written in bulk."""
    upgrade(engine)
    names = [f"user{n:06d}" for n in range(count)]
    with engine.begin() as connection:
        role_id = connection.execute(insert(role).values(authority="ROLE_USER")).inserted_primary_key[0]
        connection.execute(
            insert(person),
            [
                {
                    "username": name,
                    "username_key": username_key(name),
                    "password": "-",
                    "email": f"{name}@example.com",
                    "email_key": email_key(f"{name}@example.com"),
                }
                for name in names
            ],
        )
        ids = connection.execute(select(person.c.id)).scalars().all()
        connection.execute(insert(person_role), [{"person_id": i, "role_id": role_id} for i in ids])
        if engine.dialect.name == "postgresql":
            connection.execute(text("ANALYZE person"))


def _median_us(lookup: Callable[[Connection, str], object], engine: Engine, names: list[str]) -> float:
    """Median microseconds of one lookup of a name typed in another case (each in a
    transaction of its own, as the daemon reads), over SECONDS."""
    times = []
    started = time.perf_counter()
    for name in names:
        before = time.perf_counter()
        if run_read(engine, lookup, name) is None:
            raise RuntimeError(f"{name} was not found")
        times.append(time.perf_counter() - before)
        if len(times) >= MIN_CALLS and time.perf_counter() - started > SECONDS:
            break
    return statistics.median(times) * 1e6


def _plan(engine: Engine) -> str:
    """How the database finds the account of a login, in its own words (without PostgreSQL's
    cost estimates)."""
    statement = select(person).where(person.c.username_key == "user000001")
    with engine.connect() as connection:
        compiled = str(statement.compile(connection, compile_kwargs={"literal_binds": True}))
        rows = connection.exec_driver_sql(EXPLAIN[engine.dialect.name] + compiled).all()
    return "; ".join(re.sub(r"\s+\(cost=[^)]*\)", "", str(row[-1])).strip() for row in rows)


@contextmanager
def _databases() -> Iterator[Callable[[str, int], Engine]]:
    """Makes empty databases: SQLite files, and on a throwaway PostgreSQL server if installed."""
    folder = Path(tempfile.mkdtemp(prefix="apid-bench-logins-"))
    server = None
    try:

        def make(kind: str, count: int) -> Engine:
            nonlocal server
            if kind == "sqlite":
                return make_engine(f"sqlite:///{folder / f'{count}.db'}")
            if server is None:
                from postgres import PostgresServer

                server = PostgresServer().start()
            return make_engine(server.new_database(f"logins_{count}"))

        yield make
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def login_lookups() -> dict:
    """Per database kind and account count: the median microseconds of a login's lookup now
    and before issue 25, and the plan of the lookup now."""
    kinds = ["sqlite"] + (["postgresql"] if list(Path("/usr/lib/postgresql").glob("*/bin/initdb")) else [])
    figures: dict = {}
    with _databases() as make:
        for kind in kinds:
            for count in COUNTS:
                engine = make(kind, count)
                try:
                    _fill(engine, count)
                    typed = [f"User{n:06d}" for n in random.Random(count).sample(range(count), min(count, 5000))]
                    figures[kind, count] = {
                        "indexed_us": _median_us(find_login, engine, typed),
                        "scan_us": _median_us(_before_issue_25, engine, typed),
                        "plan": _plan(engine),
                    }
                finally:
                    engine.dispose()
    return figures


def logins_section(figures: dict) -> str:
    """The section of docs/benchmarks.md, printed alone by `scripts/bench --only logins`."""
    names = {"sqlite": "SQLite (WAL, a file)", "postgresql": "PostgreSQL (loopback)"}
    rows = "\n".join(
        f"| {names[kind]} | {count:,} | {found['indexed_us']:.0f} | {found['scan_us']:,.0f} |"
        for (kind, count), found in figures.items()
    )
    kinds = list(dict.fromkeys(kind for kind, _ in figures))
    ratios = " and ".join(
        f"**{figures[kind, COUNTS[-1]]['indexed_us'] / figures[kind, COUNTS[0]]['indexed_us']:.2f}** "
        f"on {names[kind].split()[0]}"
        for kind in kinds
    )
    plans = "\n".join(f"- {names[kind].split()[0]}: `{figures[kind, COUNTS[-1]]['plan']}`" for kind in kinds)
    return f"""## Finding a login's account against the number of accounts (issue 25: independent of it)

`apid.auth.accounts.find_login`, the unit of work `/authenticate` runs before it verifies the
password: the account of the name in any ASCII letter case, and its roles. Databases of
{COUNTS[0]:,} and {COUNTS[-1]:,} accounts (each with a role), migrated by apid and filled in bulk; names
typed in another letter case (`User000123` for `user000123`), each lookup a transaction of its
own as the daemon reads, for {SECONDS:.0f} s (at least {MIN_CALLS} lookups); the median. Argon2 aside:
nothing is verified (the hashes are placeholders), since the Argon2id verification every login
makes costs the same whatever the count, and about 150 ms (docs/accounts.md), hundreds of
times the lookup. Measured by `.venv/bin/python scripts/bench --only logins` (in process, no wrk).

| Database | Accounts | `find_login`, through the key (us) | Before issue 25: `lower(username)`, the row alone (us) |
|---|---|---|---|
{rows}

From {COUNTS[0]:,} to {COUNTS[-1]:,} accounts the lookup's time changes by a factor of
{ratios}: one row through the unique index of `username_key`, whatever the count.
Before, every login read the whole table to compare `lower(username)`, which no index serves.
How the database finds the account now, at {COUNTS[-1]:,} accounts:

{plans}"""
