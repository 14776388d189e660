"""apid.records: the units of work a plugin runs over its own table, on a real SQLite file."""

from __future__ import annotations

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine

from apid.problems import Conflict, NotFound
from apid.records import delete_row, get_row, insert_row, list_rows, update_row

metadata = MetaData()
shelf = Table(
    "library_shelf",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("room_id", Integer, key="roomId"),
    Column("label", String(50)),
    Column("version", Integer, nullable=False, default=0),
    info={"record": "shelf"},
)


@pytest.fixture
def connection(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'records.db'}")
    metadata.create_all(engine)
    with engine.begin() as connection:
        yield connection
    engine.dispose()


def test_a_record_answers_under_its_field_names(connection):
    created = insert_row(connection, shelf, {"roomId": 3, "label": "A"})
    assert created == {"id": 1, "roomId": 3, "label": "A", "version": 0}
    assert get_row(connection, shelf, 1) == created


def test_a_missing_record_is_a_404_naming_it(connection):
    with pytest.raises(NotFound, match="no shelf with id 9"):
        get_row(connection, shelf, 9)
    with pytest.raises(NotFound, match="no shelf with id 9"):
        update_row(connection, shelf, 9, 0, {"label": "B"})
    with pytest.raises(NotFound, match="no shelf with id 9"):
        delete_row(connection, shelf, 9)


def test_lists_page_by_id_and_filter_by_field(connection):
    for n in range(6):
        insert_row(connection, shelf, {"roomId": n % 2, "label": f"s{n}"})
    assert [r["label"] for r in list_rows(connection, shelf, 1, 2)] == ["s1", "s2"]
    assert [r["id"] for r in list_rows(connection, shelf, 0, 10, {"roomId": 1})] == [2, 4, 6]


def test_an_update_as_of_an_old_version_changes_nothing(connection):
    insert_row(connection, shelf, {"roomId": 1, "label": "A"})
    assert update_row(connection, shelf, 1, 0, {"label": "B"})["version"] == 1
    with pytest.raises(Conflict) as stale:
        update_row(connection, shelf, 1, 0, {"label": "C"})
    assert stale.value.extensions == {"currentVersion": 1}
    assert get_row(connection, shelf, 1)["label"] == "B"


def test_a_deleted_record_answers_as_it_was(connection):
    insert_row(connection, shelf, {"roomId": 1, "label": "A"})
    assert delete_row(connection, shelf, 1) == {"id": 1, "roomId": 1, "label": "A", "version": 0}
    assert list_rows(connection, shelf, 0, 10) == []
