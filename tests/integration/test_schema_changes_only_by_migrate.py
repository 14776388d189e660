"""Only `apid migrate` changes a schema (issue 35): every other command on the database refuses a
database behind the code installed in one line, naming the pending revisions and `apid migrate`,
and changes nothing, even where it would have written (`user add`, `hook add`, `key create`,
`iostate reload`); `apid serve` with `database.migrate: false` refuses in the same words. A move
down that would drop tables shows them with their rows and needs `--yes`.

The plugin is a distribution of migrations alone, `apid-shelf`, installed by putting it and its
`.dist-info` (entry point `apid.migrations`: shelf) on PYTHONPATH: its revisions are files the
tests write, so one can be pending.
"""

from __future__ import annotations

import sqlite3
import subprocess
import textwrap
from pathlib import Path

import pytest

from harness import ADMIN, USER, Deployment, deployment_with_accounts

CREATE_ITEM = """
    op.create_table(
        "shelf_item",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(100), nullable=False),
    )
"""
CREATE_NOTE = """
    op.create_table(
        "shelf_note",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("text", sa.String(100), nullable=False),
    )
"""
INDEX = """
    op.create_index("ix_shelf_item_name", "shelf_item", ["name"])
"""
REVISIONS = {
    "0001": (CREATE_ITEM, 'op.drop_table("shelf_item")'),
    "0002": (CREATE_NOTE, 'op.drop_table("shelf_note")'),
    "0003": (INDEX, 'op.drop_index("ix_shelf_item_name", "shelf_item")'),
}
PENDING = "apid: migrations are pending (shelf: 0002); run `apid migrate` first\n"
HOOK_ORIGIN = "http://127.0.0.1:9"


class Shelf:
    """The plugin's folder on PYTHONPATH; `revise(number)` writes one revision file more."""

    def __init__(self, root: Path) -> None:
        self.site = root / "site"
        package = self.site / "apid_shelf"
        self.migrations = package / "migrations"
        self.migrations.mkdir(parents=True)
        (package / "__init__.py").write_text('"""A plugin of tables alone."""\n')
        (self.migrations / "__init__.py").write_text('"""The shelf\'s revisions."""\n')
        info = self.site / "apid_shelf-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: apid-shelf\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text("[apid.migrations]\nshelf = apid_shelf.migrations\n")
        self.env = {"PYTHONPATH": str(self.site)}

    def revise(self, number: str) -> None:
        upgrade, downgrade = REVISIONS[number]
        below = f'"{int(number) - 1:04d}"' if number != "0001" else "None"
        (self.migrations / f"{number}_shelf.py").write_text(
            f'"""Revision {number} of the shelf."""\n\nimport sqlalchemy as sa\nfrom alembic import op\n\n'
            f'revision = "{number}"\ndown_revision = {below}\nbranch_labels = None\ndepends_on = None\n\n\n'
            f"def upgrade() -> None:\n{textwrap.indent(textwrap.dedent(upgrade).strip(), '    ')}\n\n\n"
            f"def downgrade() -> None:\n    {downgrade}\n"
        )


def apid(deployment: Deployment, shelf: Shelf, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return deployment.cli(*args, input=input, env=shelf.env)


def database(deployment: Deployment) -> sqlite3.Connection:
    return sqlite3.connect(deployment.root / "var" / "test.db")


def dump(deployment: Deployment) -> list[str]:
    """Every schema object and every row: what "changes nothing" compares."""
    connection = database(deployment)
    try:
        return list(connection.iterdump())
    finally:
        connection.close()


def rows(deployment: Deployment, sql: str) -> list[tuple]:
    connection = database(deployment)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


def tables(deployment: Deployment) -> set[str]:
    return {name for (name,) in rows(deployment, "SELECT name FROM sqlite_master WHERE type = 'table'")}


def fill(deployment: Deployment, sql: str) -> None:
    connection = database(deployment)
    try:
        with connection:
            connection.executescript(sql)
    finally:
        connection.close()


def shelf_behind(root: Path) -> tuple[Deployment, Shelf]:
    """A deployment that may not migrate as it starts, its accounts made, the shelf's 0001
    migrated with rows in it, and then the shelf's 0002 installed: pending."""
    deployment = deployment_with_accounts(
        root / "deployment",
        server={"database": {"migrate": False}},
        api={"cors": {"allowedOrigins": [HOOK_ORIGIN]}},
    )
    shelf = Shelf(root)
    shelf.revise("0001")
    migrated = apid(deployment, shelf, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "apid: created the schema of plugin shelf (revision 0001)" in migrated.stdout.splitlines()
    fill(deployment, "INSERT INTO shelf_item (name) VALUES ('a'), ('b');")
    shelf.revise("0002")
    return deployment, shelf


# Each command as it would succeed on a database up to date: they write (`user add`, `hook add`,
# `key create`, `iostate reload`, `hook enable`, `key revoke`...) or read.
COMMANDS = {
    "user add": ["user", "add", "carol", "--email", "carol@example.com", "--role", "ROLE_USER", "--password-stdin"],
    "hook add": ["hook", "add", "--user", ADMIN[0], "--url", f"{HOOK_ORIGIN}/hook", "--service", "person"],
    "key create": ["key", "create", "--user", ADMIN[0], "--name", "ci", "--role", "ROLE_ADMIN"],
    "iostate reload": ["iostate", "reload", "--wait", "0"],
    "hook list": ["hook", "list"],
    "hook disable": ["hook", "disable", "1"],
    "key list": ["key", "list"],
    "key revoke": ["key", "revoke", "1"],
}


@pytest.fixture(scope="module")
def behind(tmp_path_factory) -> tuple[Deployment, Shelf]:
    return shelf_behind(tmp_path_factory.mktemp("behind"))


@pytest.mark.parametrize("command", list(COMMANDS), ids=list(COMMANDS))
def test_a_command_on_a_database_behind_refuses_naming_the_pending_revision_and_changes_nothing(behind, command):
    deployment, shelf = behind
    before = dump(deployment)
    assert rows(deployment, "SELECT version_num FROM alembic_version_shelf") == [("0001",)]

    done = apid(deployment, shelf, *COMMANDS[command], input="carol-password-1\n")

    assert (done.returncode, done.stdout, done.stderr) == (1, "", PENDING)
    assert dump(deployment) == before
    assert rows(deployment, "SELECT version_num FROM alembic_version_shelf") == [("0001",)]
    assert "shelf_note" not in tables(deployment)
    assert rows(deployment, "SELECT username FROM person ORDER BY id") == [(ADMIN[0],), (USER[0],)]


def test_serve_that_may_not_migrate_refuses_in_the_same_words(behind):
    deployment, shelf = behind
    before = dump(deployment)

    refused = apid(deployment, shelf, "serve")

    assert refused.returncode == 1
    assert "apid ready" not in refused.stdout
    assert f"apid: cannot start: {PENDING[len('apid: ') :]}" in refused.stderr
    assert dump(deployment) == before


def test_status_says_pending_and_changes_nothing(behind):
    deployment, shelf = behind
    before = dump(deployment)

    status = apid(deployment, shelf, "migrate", "--status")

    assert status.returncode == 1
    assert "shelf: current revision 0001, head 0002, pending 0002" in status.stdout.splitlines()
    assert dump(deployment) == before


def test_after_apid_migrate_says_what_it_did_the_commands_work(tmp_path):
    deployment, shelf = shelf_behind(tmp_path)
    refused = apid(deployment, shelf, *COMMANDS["user add"], input="carol-password-1\n")
    assert (refused.returncode, refused.stderr) == (1, PENDING)

    migrated = apid(deployment, shelf, "migrate")

    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stdout.splitlines()[-1] == "apid: upgraded the schema of plugin shelf from revision 0001 to 0002"
    assert migrated.stdout.splitlines()[0].startswith("apid: the database schema is up to date (revision ")
    for command in ("user add", "hook add", "key create"):
        done = apid(deployment, shelf, *COMMANDS[command], input="carol-password-1\n")
        assert done.returncode == 0, (command, done.stderr)
    assert rows(deployment, "SELECT username FROM person ORDER BY id") == [(ADMIN[0],), (USER[0],), ("carol",)]
    assert rows(deployment, "SELECT count(*) FROM hook") == [(1,)]
    assert rows(deployment, "SELECT count(*) FROM api_key") == [(1,)]


def test_a_command_on_a_new_database_names_every_pending_revision_and_creates_no_table(tmp_path):
    deployment = Deployment(tmp_path)
    deployment.write()

    done = deployment.cli(*COMMANDS["user add"], input="carol-password-1\n")

    assert done.returncode == 1
    assert done.stderr.startswith("apid: migrations are pending (apid: 0001, 0002, "), done.stderr
    assert done.stderr.endswith("); run `apid migrate` first\n") and done.stderr.count("\n") == 1
    assert tables(deployment) == set()


# --- apid migrate --down / --to: a move that drops tables -------------------------------------------


@pytest.fixture
def stocked(tmp_path) -> tuple[Deployment, Shelf]:
    """The shelf at 0003 (two tables and an index), with rows in both tables."""
    deployment = deployment_with_accounts(tmp_path / "deployment")
    shelf = Shelf(tmp_path)
    for number in REVISIONS:
        shelf.revise(number)
    migrated = apid(deployment, shelf, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    fill(
        deployment,
        "INSERT INTO shelf_item (name) VALUES ('a'), ('b'), ('c');INSERT INTO shelf_note (text) VALUES ('n');",
    )
    return deployment, shelf


def test_a_move_down_dropping_no_table_needs_no_confirmation(stocked):
    deployment, shelf = stocked

    down = apid(deployment, shelf, "migrate", "--down", "shelf")

    assert (down.returncode, down.stderr) == (0, "")
    assert down.stdout == "apid: downgraded the schema of plugin shelf from revision 0003 to 0002\n"
    assert rows(deployment, "SELECT version_num FROM alembic_version_shelf") == [("0002",)]


def test_yes_on_a_move_that_drops_no_table_only_moves(stocked):
    deployment, shelf = stocked
    done = apid(deployment, shelf, "migrate", "--to", "shelf@0002", "--yes")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "apid: downgraded the schema of plugin shelf from revision 0003 to 0002\n"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--down", "shelf"],
            "apid: moving shelf down to revision 0001 would drop 1 table: shelf_note (1 row); "
            "nothing was changed; add --yes to drop them\n",
        ),
        (
            ["--to", "shelf@base"],
            "apid: moving shelf down to base would drop 2 tables: shelf_item (3 rows), shelf_note (1 row); "
            "nothing was changed; add --yes to drop them\n",
        ),
    ],
    ids=["down one", "to base"],
)
def test_a_move_down_that_would_drop_tables_is_refused_showing_their_rows(stocked, args, said):
    deployment, shelf = stocked
    assert apid(deployment, shelf, "migrate", "--down", "shelf").returncode == 0  # 0003 -> 0002: an index
    before = dump(deployment)

    refused = apid(deployment, shelf, "migrate", *args)

    assert (refused.returncode, refused.stdout, refused.stderr) == (1, "", said)
    assert dump(deployment) == before


def test_a_move_down_with_yes_drops_the_tables_and_says_how_many_rows_went(stocked):
    deployment, shelf = stocked
    people = rows(deployment, "SELECT * FROM person ORDER BY id")

    done = apid(deployment, shelf, "migrate", "--to", "shelf@base", "--yes")

    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        "apid: removed the schema of plugin shelf (it was at revision 0003); "
        "dropped shelf_item (3 rows), shelf_note (1 row)\n"
    )
    assert not {"shelf_item", "shelf_note"} & tables(deployment)
    assert rows(deployment, "SELECT version_num FROM alembic_version_shelf") == []
    assert rows(deployment, "SELECT * FROM person ORDER BY id") == people

    back = apid(deployment, shelf, "migrate")
    assert back.stdout.splitlines()[-1] == "apid: created the schema of plugin shelf (revision 0003)"


@pytest.mark.parametrize(
    "args",
    [["--yes"], ["--down", "shelf", "--plan", "--yes"], ["--status", "--yes"]],
    ids=" ".join,
)
def test_yes_goes_only_with_a_move(stocked, args):
    deployment, shelf = stocked
    before = dump(deployment)
    done = apid(deployment, shelf, "migrate", *args)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "apid: --yes goes with --to or --down, without --plan\n"
    assert dump(deployment) == before
