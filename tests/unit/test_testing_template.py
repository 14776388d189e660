"""The migrated database a test daemon starts from (apid.testing.template) is named by what
made it: a changed or added revision file names another, so no daemon starts from a stale one;
a copy is whole, and a template not there yet is no empty database."""

from __future__ import annotations

import sqlite3

from apid.testing.template import restore, template_of


def test_the_name_follows_every_revision_file(tmp_path):
    folder = tmp_path / "migrations"
    folder.mkdir()
    (folder / "0001_first.py").write_text("revision = '0001'\n")
    first = template_of([folder])
    assert template_of([folder]) == first
    (folder / "0001_first.py").write_text("revision = '0001'  # changed\n")
    changed = template_of([folder])
    assert changed != first
    (folder / "0002_second.py").write_text("revision = '0002'\n")
    assert template_of([folder]) not in (first, changed)


def test_a_copy_is_whole_and_a_missing_template_makes_nothing(tmp_path):
    template, database = tmp_path / "template.db", tmp_path / "var" / "apid.db"
    database.parent.mkdir()
    assert not restore(template, database)
    assert not template.exists() and not database.exists()
    with sqlite3.connect(template) as connection:
        connection.execute("CREATE TABLE kept (id INTEGER)")
        connection.execute("INSERT INTO kept VALUES (7)")
    assert restore(template, database)
    with sqlite3.connect(database) as connection:
        assert connection.execute("SELECT id FROM kept").fetchall() == [(7,)]
