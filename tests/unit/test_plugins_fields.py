"""A controller's fields (`Controller.table` and `fields`) bound against its IO State: a file
naming a field the loaded code does not declare is refused at start and at reload, naming
where, so that a rules change that needs new code waits for it (issue 27, item 1)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table
from twisted.logger import capturedLogs

from apid.config.files import load_api
from apid.iostate import IOStateError
from apid.plugin import Call, Controller, action
from apid.plugin_host.discovery import FoundPlugin, LoadedController, PluginError, bind, declared_fields, load
from apid.plugin_host.rules import RuleBook

ROOT = Path(__file__).resolve().parents[2]
SECURITY = load_api(ROOT / "etc" / "service_api.yml", ROOT).security
ITEMS = Table(
    "inventory_item",
    MetaData(),
    Column("id", Integer, primary_key=True),
    Column("name", String(200)),
    Column("reorder_level", Integer, key="reorderLevel"),
)
ITEM_STATE = {
    "NAME": "item",
    "NETWORKGRP": "public",
    "VALUES": {
        "id": {"type": "Long", "key": "PKEY"},
        "name": {"type": "String"},
        "max": {"type": "Integer"},
    },
    "CURRENTSTABLE": "1",
    "VERSION": {
        "1": {
            "URI": {
                "show": {"METHOD": "GET", "REQUEST": {"permitAll": ["id"]}, "RESPONSE": {"permitAll": ["id", "name"]}},
                "update": {
                    "METHOD": "PUT",
                    "REQUEST": {"permitAll": ["id", "name"]},
                    "RESPONSE": {"permitAll": ["id"]},
                },
            }
        }
    },
}


class Items(Controller):
    name = "item"
    table = ITEMS
    fields = frozenset({"max"})

    @action
    def show(self, call: Call) -> dict:
        return {}

    @action
    def update(self, call: Call) -> dict:
        return {}


class Undeclared(Items):
    table = None
    fields = None


class EntryPoint(SimpleNamespace):
    def load(self):
        return self.cls


def loaded(cls: type[Controller], distribution: str = "apid-inventory") -> LoadedController:
    entry = EntryPoint(value=f"x:{cls.__name__}", cls=cls)
    (controller,) = load([FoundPlugin(name=cls.name, distribution=distribution, entry_point=entry)])
    return controller


def write_items(directory: Path, change=lambda state: None) -> None:
    state = json.loads(json.dumps(ITEM_STATE))
    change(state)
    (directory / "item.json").write_text(json.dumps(state))


def new_field(state: dict) -> None:
    """Version 2 of the rules: `colour`, a field no column of the loaded code holds."""
    state["VALUES"]["colour"] = {"type": "String"}
    state["VERSION"]["1"]["URI"]["update"]["REQUEST"]["permitAll"].append("colour")


def test_the_fields_are_the_keys_of_the_tables_columns_and_the_declared_ones():
    assert declared_fields(Items, "item") == {"id", "name", "reorderLevel", "max"}
    assert declared_fields(Undeclared, "item") is None


def test_rules_naming_only_declared_fields_bind(tmp_path):
    write_items(tmp_path)
    assert "item" in bind([loaded(Items)], tmp_path, SECURITY).rules.controllers


def test_rules_naming_a_field_the_code_does_not_declare_are_refused_naming_where(tmp_path):
    write_items(tmp_path, new_field)
    with pytest.raises(IOStateError) as refused:
        bind([loaded(Items)], tmp_path, SECURITY)
    assert str(refused.value) == (
        f"{tmp_path / 'item.json'}: controller item, version 1, action update, REQUEST permitAll: field 'colour' "
        "is not one the controller of item (distribution apid-inventory) stores or answers (it declares: id, "
        "max, name, reorderLevel); start apid with code that handles it before loading these rules"
    )


def test_a_reload_needing_new_code_is_refused_and_the_rules_in_force_stay(tmp_path):
    write_items(tmp_path)
    bound = bind([loaded(Items)], tmp_path, SECURITY)
    book = RuleBook(bound, tmp_path, SECURITY)
    write_items(tmp_path, new_field)
    with pytest.raises(IOStateError, match=re.escape("field 'colour' is not one the controller of item")):
        book.read()
    assert book.current is bound.rules
    assert "colour" not in book.current.controllers["item"].values


def test_a_controller_declaring_nothing_is_not_checked_and_warned_of_at_load(tmp_path):
    with capturedLogs() as events:
        controller = loaded(Undeclared, "apid-old")
    warnings = [event for event in events if event["log_namespace"] == "apid.plugins"]
    assert len(warnings) == 1 and warnings[0]["plugin"] == "item (distribution apid-old)"
    write_items(tmp_path, new_field)
    assert "colour" in bind([controller], tmp_path, SECURITY).rules.controllers["item"].values


@pytest.mark.parametrize(
    "declaration, reason",
    [
        ({"fields": "name"}, "Wrong.fields must be a collection of field names"),
        ({"fields": frozenset({1})}, "Wrong.fields must be a collection of field names"),
        ({"table": "inventory_item"}, "Wrong.table must be a sqlalchemy Table, not 'inventory_item'"),
    ],
)
def test_a_declaration_of_the_wrong_kind_stops_the_load_naming_the_plugin(declaration, reason):
    wrong = type("Wrong", (Items,), declaration)
    with pytest.raises(PluginError, match=re.escape(f"plugin item (distribution apid-inventory): {reason}")):
        loaded(wrong)
