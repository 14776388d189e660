"""A plugin declares its tables once (SQLAlchemy metadata in its migrations package): its
revisions are generated from the difference with the database (`generate`), `plan` lists what
`upgrade_all` and `move` then run, and `move` takes one schema to a revision, up or down."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from apid.plugin_host.migrations import MigrationSource
from apid.store.database import make_engine
from apid.store.migrate import (
    APID,
    Target,
    TargetRefused,
    generate,
    move,
    plan,
    plan_sql,
    schema_status,
    upgrade_all,
)

DIRECTORY = Path(__file__).resolve().parents[2] / "docs" / "examples" / "apid-directory"

STORE = """
from sqlalchemy import Column, Integer, MetaData, String, Table, text

metadata = MetaData()
item = Table(
    "shop_item",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False),
    Column("version", Integer, nullable=False, server_default=text("0")),
{extra}
)
"""
REORDER_LEVEL = '    Column("reorder_level", Integer, nullable=True, key="reorderLevel"),'


class Shop:
    """A plugin `shop` written into a temporary folder: its table declared in `store.py`, its
    migrations package exporting that metadata, and no revision yet."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.package = root / "apid_shop"
        (self.package / "migrations").mkdir(parents=True)
        (self.package / "__init__.py").write_text("")
        (self.package / "migrations" / "__init__.py").write_text("from apid_shop.store import metadata\n")
        self.declare()
        monkeypatch.syspath_prepend(str(root))
        self.source = MigrationSource.from_package("shop", "apid_shop.migrations", "apid-shop")

    def declare(self, extra: str = "") -> None:
        """Write the table as the plugin's code declares it; the next import reads it anew."""
        (self.package / "store.py").write_text(STORE.format(extra=extra))
        forget()

    def revisions(self) -> list[str]:
        return sorted(path.name for path in (self.package / "migrations").glob("0*.py"))


def forget() -> None:
    for name in [name for name in sys.modules if name.split(".")[0] == "apid_shop"]:
        del sys.modules[name]


@pytest.fixture
def shop(tmp_path, monkeypatch) -> Iterator[Shop]:
    yield Shop(tmp_path / "packages", monkeypatch)
    forget()  # the next test's shop is another


def columns(empty_engine, table: str) -> list[str]:
    return [column["name"] for column in inspect(empty_engine).get_columns(table)]


def test_a_new_column_is_generated_applied_and_round_trips(empty_engine, shop):
    upgrade_all(empty_engine, [shop.source])
    first = generate(empty_engine, shop.source, "the shop's items")
    assert first.name == "0001_the_shop_s_items.py" and shop.revisions() == [first.name]
    upgrade_all(empty_engine, [shop.source])
    assert columns(empty_engine, "shop_item") == ["id", "name", "version"]

    shop.declare(REORDER_LEVEL)
    second = generate(empty_engine, shop.source, "reorder level")
    assert second.name == "0002_reorder_level.py"
    written = second.read_text()
    assert "down_revision = '0001'" in written and "add_column" in written and "drop_column" in written
    (change,) = [c for c in upgrade_all(empty_engine, [shop.source]) if c.schema == "shop"]
    assert (change.before, change.after) == ("0001", "0002")
    with empty_engine.begin() as connection:
        connection.execute(text("INSERT INTO shop_item (name, reorder_level) VALUES ('bolt', 25)"))

    down = move(empty_engine, [shop.source], Target("shop", None))
    assert down.describe() == "downgraded the schema of plugin shop from revision 0002 to 0001"
    assert columns(empty_engine, "shop_item") == ["id", "name", "version"]
    up = move(empty_engine, [shop.source], Target("shop", "head"))
    assert up.describe() == "upgraded the schema of plugin shop from revision 0001 to 0002"
    assert columns(empty_engine, "shop_item") == ["id", "name", "version", "reorder_level"]
    with empty_engine.connect() as connection:  # the row kept through the rebuild; its dropped value gone
        assert connection.execute(text("SELECT name, reorder_level FROM shop_item")).all() == [("bolt", None)]


def test_nothing_is_generated_when_the_tables_match_the_database(empty_engine, shop):
    upgrade_all(empty_engine, [shop.source])
    generate(empty_engine, shop.source, "first")
    upgrade_all(empty_engine, [shop.source])
    with pytest.raises(TargetRefused, match=r"tables of apid_shop\.migrations\.metadata match the database"):
        generate(empty_engine, shop.source, "again")
    assert shop.revisions() == ["0001_first.py"]


def test_a_revision_is_generated_only_on_a_database_at_the_plugins_head(tmp_path, shop):
    empty_engine = make_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    upgrade_all(empty_engine, [shop.source])
    generate(empty_engine, shop.source, "first")
    lacking = r"plugin shop \(distribution apid-shop\): the database lacks its revisions 0001"
    with pytest.raises(TargetRefused, match=lacking):
        generate(empty_engine, shop.source, "second")


def test_a_plugin_without_declared_tables_is_named(tmp_path, shop):
    (shop.package / "migrations" / "__init__.py").write_text("")
    shop.declare()
    empty_engine = make_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    undeclared = r"plugin shop \(distribution apid-shop\): apid_shop\.migrations has no `metadata`"
    with pytest.raises(TargetRefused, match=undeclared):
        generate(empty_engine, shop.source, "first")


def test_the_directorys_declared_tables_are_those_its_migrations_make(tmp_path, monkeypatch):
    """docs/examples/apid-directory declares its tables once: its migrations agree."""
    monkeypatch.syspath_prepend(str(DIRECTORY))
    directory = MigrationSource.from_package("directory", "apid_directory.migrations", "apid-directory")
    empty_engine = make_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    upgrade_all(empty_engine, [directory])
    with pytest.raises(TargetRefused, match="match the database: nothing to generate"):
        generate(empty_engine, directory, "nothing")
    assert sorted(p.name for p in (DIRECTORY / "apid_directory" / "migrations").glob("0*.py")) == ["0001_directory.py"]


def test_the_plan_lists_what_migrate_then_runs(tmp_path, shop):
    empty_engine = make_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    upgrade_all(empty_engine, [shop.source])
    generate(empty_engine, shop.source, "the items")
    shop.declare(REORDER_LEVEL)
    (shop.package / "migrations" / "0002_reorder_level.py").write_text(REVISION_0002)

    planned = plan(empty_engine, [shop.source])
    assert [p.describe() for p in planned] == [
        [f"apid: at revision {planned[0].current}, nothing to run"],
        ["shop: from revision none to 0002", "  upgrade 0001: the items", "  upgrade 0002: Reorder levels."],
    ]
    changes = upgrade_all(empty_engine, [shop.source])
    assert [(c.schema, c.before, c.after) for c in changes] == [(p.schema, p.current, p.target) for p in planned]
    assert plan(empty_engine, [shop.source])[1].steps == ()

    down = plan(empty_engine, [shop.source], Target("shop", "base"))
    assert down[0].describe() == [
        "shop: from revision 0002 to none (base)",
        "  downgrade 0002: Reorder levels.",
        "  downgrade 0001: the items",
    ]
    assert move(empty_engine, [shop.source], Target("shop", "base"), drop=True).describe() == (
        "removed the schema of plugin shop (it was at revision 0002); dropped shop_item (0 rows)"
    )
    assert "shop_item" not in inspect(empty_engine).get_table_names()
    assert [s.describe() for s in schema_status(empty_engine, [shop.source])][1] == (
        "shop: current revision none, head 0002, pending 0001, 0002"
    )


REVISION_0002 = textwrap.dedent('''
    """Reorder levels.

    Revision ID: 0002
    Revises: 0001
    """

    import sqlalchemy as sa
    from alembic import op

    revision = "0002"
    down_revision = "0001"


    def upgrade() -> None:
        with op.batch_alter_table("shop_item") as batch:
            batch.add_column(sa.Column("reorder_level", sa.Integer, nullable=True))


    def downgrade() -> None:
        with op.batch_alter_table("shop_item") as batch:
            batch.drop_column("reorder_level")
''')


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (Target("nowhere", "head"), r"no schema named 'nowhere'; the schemas: apid, shop"),
        (Target("shop", "0007"), r"shop has no revision '0007'; its revisions: 0001"),
        (Target(APID, "zz"), r"apid has no revision 'zz'"),
    ],
)
def test_a_schema_or_revision_that_does_not_exist_is_named(tmp_path, shop, target, message):
    empty_engine = make_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    upgrade_all(empty_engine, [shop.source])
    generate(empty_engine, shop.source, "first")
    with pytest.raises(TargetRefused, match=message):
        plan(empty_engine, [shop.source], target)


def test_nothing_to_downgrade_is_said(tmp_path, shop):
    empty_engine = make_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    with pytest.raises(TargetRefused, match="shop: nothing to downgrade"):
        move(empty_engine, [shop.source], Target("shop", None))


def test_target_is_parsed_from_schema_at_revision():
    assert Target.parse("directory@0002") == Target("directory", "0002")
    with pytest.raises(TargetRefused, match="SCHEMA@REVISION"):
        Target.parse("directory")


def test_a_new_plugins_declared_tables_are_those_its_first_migration_makes(tmp_path, monkeypatch):
    """`apid new-plugin` writes the table once in store.py and generates the first revision from it."""
    made = subprocess.run(
        [sys.executable, "-m", "apid", "new-plugin", "stock", "--controller", "item", "--directory", "apid-stock"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    assert "wrote apid-stock/apid_stock/migrations/0001_item.py" in made.stdout
    monkeypatch.syspath_prepend(str(tmp_path / "apid-stock"))
    stock = MigrationSource.from_package("stock", "apid_stock.migrations", "apid-stock")
    empty_engine = make_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    try:
        upgrade_all(empty_engine, [stock])
        with pytest.raises(TargetRefused, match="match the database: nothing to generate"):
            generate(empty_engine, stock, "nothing")
    finally:
        for name in [name for name in sys.modules if name.split(".")[0] == "apid_stock"]:
            del sys.modules[name]


def test_the_plan_writes_the_sql_it_would_run_without_running_it(empty_engine, shop):
    upgrade_all(empty_engine, [shop.source])
    generate(empty_engine, shop.source, "the items")
    upgrade_all(empty_engine, [shop.source])
    shop.declare(REORDER_LEVEL)
    generate(empty_engine, shop.source, "reorder level")

    apid_sql, shop_sql = plan_sql(empty_engine, [shop.source])
    assert apid_sql == ""  # nothing to run
    assert re.search(r"ALTER TABLE shop_item ADD COLUMN reorder_level INTEGER", shop_sql), shop_sql
    assert (
        "UPDATE alembic_version_shop SET version_num='0002' WHERE alembic_version_shop.version_num = '0001'" in shop_sql
    )
    assert "reorder_level" not in columns(empty_engine, "shop_item")

    (down,) = plan_sql(empty_engine, [shop.source], Target("shop", "base"))
    assert "DROP TABLE shop_item" in down and "ADD COLUMN" not in down


def test_revisions_that_read_the_database_are_named_when_their_sql_is_asked_for(tmp_path):
    empty_engine = make_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    with pytest.raises(TargetRefused, match=r"apid: the SQL of upgrade 0003 -> 0004 cannot be written without running"):
        plan_sql(empty_engine, [])
