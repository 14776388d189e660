"""What a downgrade would drop (`apid.store.drops`), found by running it and rolling back; `move`
refusing such a downgrade unless told to drop, and saying what it dropped; and the one message
of a database behind the code (`MigrationsPending`)."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, text

from apid.plugin_host.migrations import MigrationSource
from apid.store.drops import DroppedTable, describe_tables, row_counts, tables_dropped_by
from apid.store.migrate import (
    DropRefused,
    MigrationRefused,
    MigrationsPending,
    SchemaChange,
    SchemaStatus,
    Target,
    move,
    require_current,
    upgrade_all,
)

REVISION = '''"""Revision {number}."""
import sqlalchemy as sa
from alembic import op

revision = "{number}"
down_revision = {below}
branch_labels = None
depends_on = None


def upgrade():
    {upgrade}


def downgrade():
    {downgrade}
'''
REVISIONS = {
    "0001": (
        'op.create_table("crate_box", sa.Column("id", sa.Integer, primary_key=True))',
        'op.drop_table("crate_box")',
    ),
    "0002": (
        'op.create_table("order", sa.Column("id", sa.Integer, primary_key=True))',  # a reserved word: quoted
        'op.drop_table("order")',
    ),
    "0003": (
        'op.add_column("crate_box", sa.Column("label", sa.String(20)))',
        'with op.batch_alter_table("crate_box") as batch:\n        batch.drop_column("label")',
    ),
}


@pytest.fixture
def crate(tmp_path, monkeypatch) -> MigrationSource:
    """A plugin `crate` with three revisions: two tables, then a column."""
    folder = tmp_path / "packages" / "apid_crate_migrations"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    for number, (up, down) in REVISIONS.items():
        below = f'"{int(number) - 1:04d}"' if number != "0001" else "None"
        written = REVISION.format(number=number, below=below, upgrade=up, downgrade=down)
        (folder / f"{number}_crate.py").write_text(written)
    monkeypatch.syspath_prepend(str(folder.parent))
    return MigrationSource.from_package("crate", "apid_crate_migrations", "apid-crate")


def stocked(empty_engine, crate) -> None:
    upgrade_all(empty_engine, [crate])
    with empty_engine.begin() as connection:
        connection.execute(text("INSERT INTO crate_box (label) VALUES ('a'), ('b')"))
        connection.execute(text('INSERT INTO "order" (id) VALUES (1)'))


def version(empty_engine) -> list[tuple]:
    with empty_engine.connect() as connection:
        return [tuple(row) for row in connection.execute(text("SELECT version_num FROM alembic_version_crate"))]


def test_a_dropped_table_says_its_rows_in_the_singular_or_plural():
    assert DroppedTable("a", 1).describe() == "a (1 row)"
    assert DroppedTable("b", 0).describe() == "b (0 rows)"
    assert describe_tables([DroppedTable("a", 1), DroppedTable("b", 12)]) == "a (1 row), b (12 rows)"


def test_the_tables_a_run_drops_are_found_and_the_run_rolled_back(empty_engine):
    with empty_engine.begin() as connection:
        connection.execute(text("CREATE TABLE kept (id INTEGER PRIMARY KEY)"))
        connection.execute(text('CREATE TABLE "order" (id INTEGER PRIMARY KEY)'))
        connection.execute(text('INSERT INTO "order" (id) VALUES (1), (2), (3)'))
    with empty_engine.connect() as connection:
        connection.execute(text("SELECT 1"))  # in a transaction, as a migration's connection is
        dropped = tables_dropped_by(connection, lambda: connection.execute(text('DROP TABLE "order"')))
        assert dropped == {"order"}
        assert not connection.in_transaction()
        assert row_counts(connection, ["order", "kept"]) == (DroppedTable("kept", 0), DroppedTable("order", 3))
    assert {"kept", "order"} <= set(inspect(empty_engine).get_table_names())


def test_a_run_that_fails_is_rolled_back_and_its_error_raised(empty_engine):
    with empty_engine.begin() as connection:
        connection.execute(text("CREATE TABLE kept (id INTEGER PRIMARY KEY)"))

    def fails() -> None:
        connection.execute(text("DROP TABLE kept"))
        raise RuntimeError("the revision failed")

    with empty_engine.connect() as connection, pytest.raises(RuntimeError, match="the revision failed"):
        tables_dropped_by(connection, fails)
    assert "kept" in inspect(empty_engine).get_table_names()


def test_a_move_down_that_drops_tables_is_refused_unless_told_and_changes_nothing(empty_engine, crate):
    stocked(empty_engine, crate)
    move(empty_engine, [crate], Target("crate", "0002"))  # a column only: no table dropped, no refusal
    assert version(empty_engine) == [("0002",)]

    with pytest.raises(DropRefused) as refused:
        move(empty_engine, [crate], Target("crate", "base"))

    assert isinstance(refused.value, MigrationRefused)
    assert refused.value.tables == (DroppedTable("crate_box", 2), DroppedTable("order", 1))
    assert str(refused.value) == (
        "moving crate down to base would drop 2 tables: crate_box (2 rows), order (1 row); "
        "nothing was changed; add --yes to drop them"
    )
    assert version(empty_engine) == [("0002",)]
    assert {"crate_box", "order"} <= set(inspect(empty_engine).get_table_names())


def test_a_move_down_told_to_drop_says_what_it_dropped(empty_engine, crate):
    stocked(empty_engine, crate)

    one = move(empty_engine, [crate], Target("crate", "0001"), drop=True)
    assert one.dropped == (DroppedTable("order", 1),)
    assert one.describe() == "downgraded the schema of plugin crate from revision 0003 to 0001; dropped order (1 row)"
    assert "order" not in inspect(empty_engine).get_table_names()

    base = move(empty_engine, [crate], Target("crate", None), drop=True)
    assert base.describe() == "removed the schema of plugin crate (it was at revision 0001); dropped crate_box (2 rows)"
    assert version(empty_engine) == []


def test_a_move_up_drops_nothing_and_is_never_refused(empty_engine, crate):
    (change,) = [c for c in upgrade_all(empty_engine, [crate]) if c.schema == "crate"]
    assert change.dropped == ()
    down = move(empty_engine, [crate], Target("crate", "base"), drop=True)
    up = move(empty_engine, [crate], Target("crate", "head"))
    assert (down.after, up.after, up.dropped) == (None, "0003", ())


def test_one_message_names_each_schema_behind_and_its_pending_revisions():
    behind = [
        SchemaStatus("apid", "0010", "0012", ("0011", "0012")),
        SchemaStatus("directory", "0001", "0002", ("0002",)),
    ]
    assert str(MigrationsPending(behind)) == (
        "migrations are pending (apid: 0011, 0012; directory: 0002); run `apid migrate` first"
    )


def test_require_current_raises_the_message_until_migrated(empty_engine, crate):
    with pytest.raises(MigrationsPending, match=r"\(apid: 0001, .*; crate: 0001, 0002, 0003\); run `apid migrate`"):
        require_current(empty_engine, [crate])
    assert inspect(empty_engine).get_table_names() == []  # checking created nothing
    upgrade_all(empty_engine, [crate])
    require_current(empty_engine, [crate])


def test_a_change_without_drops_describes_itself_as_before():
    assert SchemaChange("0002", "0001", "crate", down=True).describe() == (
        "downgraded the schema of plugin crate from revision 0002 to 0001"
    )
