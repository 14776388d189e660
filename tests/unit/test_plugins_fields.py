"""A controller's fields (`class ...(Controller, stores=...)`) bound against its IO State: a file
naming a field the loaded code does not declare is refused at start and at reload, naming
where, so that a rules change that needs new code waits for it (issue 27, item 1). The names a
plugin gives its own attributes mean nothing to apid: 0.1's plugins had `table` and `fields` of
their own (issue 35, item 1); the set of names the release before declared as `fields` is read
and only warned about until 0.3."""

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
from apid.plugin import Call, Controller, Page, action
from apid.plugin_host.discovery import FoundPlugin, LoadedController, PluginError, bind, check_chosen, discover, load
from apid.plugin_host.field_declarations import Declared, declared_fields
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


class Undeclared(Controller):
    name = "item"

    @action
    def show(self, call: Call) -> dict:
        return {}

    @action
    def update(self, call: Call) -> dict:
        return {}


class Items(Undeclared, stores=(ITEMS, "max")):
    pass


class OwnAttributes(Undeclared):
    """A 0.1 plugin's controller: `table` and `fields` are its own (API name to column)."""

    table = ITEMS
    fields = {"id": ITEMS.c.id, "name": ITEMS.c.name}  # noqa: RUF012 (as 0.1's docs wrote it)


class OldSpelling(Undeclared):
    """The release before declared `fields` as a set of names."""

    fields = frozenset({"id", "name", "max"})


class Paged(Undeclared, stores=ITEMS):
    @action(answers="list", page=Page(default=10, maximum=100))
    def list(self, call: Call) -> list:
        return []


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
    assert declared_fields(Items) == Declared(frozenset({"id", "name", "reorderLevel", "max"}), strict=True)
    assert declared_fields(Undeclared) is None


def test_attributes_a_plugin_names_for_itself_declare_nothing():
    assert declared_fields(OwnAttributes) is None  # a Table and a mapping: the plugin's own


def test_the_old_spelling_is_read_and_held_to_less():
    assert declared_fields(OldSpelling) == Declared(frozenset({"id", "name", "max"}), strict=False)


def test_an_action_that_pages_declares_offset_and_max():
    assert declared_fields(Paged) == Declared(frozenset({"id", "name", "reorderLevel", "offset", "max"}), strict=True)


def test_a_0_1_plugins_own_table_and_fields_do_not_stop_it(tmp_path):
    """Its rules name `max`, which no declaration of apid's holds: they bind as they did in 0.1."""
    write_items(tmp_path)
    assert "max" in bind([loaded(OwnAttributes)], tmp_path, SECURITY).rules.controllers["item"].values


def test_rules_the_old_spelling_does_not_cover_are_warned_of_and_bind(tmp_path):
    write_items(tmp_path, new_field)
    with pytest.warns(DeprecationWarning, match=r"`fields = frozenset\(\{\.\.\.\}\)` is deprecated") as warned:
        controller = loaded(OldSpelling)
    assert warned[0].filename == __file__  # at the plugin's class, where the fix is made
    with capturedLogs() as events:
        bound = bind([controller], tmp_path, SECURITY)
    assert "colour" in bound.rules.controllers["item"].values
    (warning,) = [event for event in events if event["log_namespace"] == "apid.plugins"]
    assert "field 'colour' is not one the controller of item" in warning["error"]
    assert warning["plugin"] == "item (distribution apid-inventory)"


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
    "stores, reason",
    [
        ((ITEMS, 1), "Wrong: stores= takes Tables and field names, not int 1"),
        ((ITEMS.c.id,), "Wrong: stores= takes Tables and field names, not Column"),
    ],
)
def test_a_declaration_of_the_wrong_kind_stops_the_load_naming_the_plugin(stores, reason):
    class Wrong(Undeclared, stores=stores):
        pass

    with pytest.raises(PluginError, match=re.escape(reason)) as refused:
        loaded(Wrong)
    assert str(refused.value).startswith("plugin item (distribution apid-inventory): ")


# --- loadPlugins: which installed distributions load -------------------------------------------------


def entry(name: str, distribution: str):
    return SimpleNamespace(name=name, value=f"{name}:X", dist=SimpleNamespace(name=distribution))


def test_only_the_distributions_named_load_and_apids_own_always():
    announced = [entry("person", "apid"), entry("team", "apid-sample-plugin"), entry("shop", "apid-shop")]
    assert [found.name for found in discover(announced)] == ["person", "shop", "team"]
    assert [found.name for found in discover(announced, only=("apid-shop",))] == ["person", "shop"]


def test_a_name_no_installed_distribution_has_stops_the_start_naming_it():
    with pytest.raises(PluginError, match=r"loadPlugins names apid-shp, which no installed distribution"):
        check_chosen(("apid-shp", "apid-sample-plugin"))
    check_chosen(("apid-sample-plugin",))


# --- pluginFailure: skip -----------------------------------------------------------------------


class Broken(SimpleNamespace):
    def load(self):
        raise ImportError("No module named 'shop_helpers'")


def found(name: str, distribution: str, entry) -> FoundPlugin:
    return FoundPlugin(name=name, distribution=distribution, entry_point=entry)


def test_a_plugin_that_cannot_load_stops_the_start_unless_the_operator_allows_it_left_out():
    plugins = [
        found("shop", "apid-shop", Broken(value="apid_shop:Shop")),
        found("item", "apid-inventory", EntryPoint(value="x:Items", cls=Items)),
    ]
    with pytest.raises(PluginError, match=r"plugin shop \(distribution apid-shop\) failed to load: ImportError"):
        load(plugins)
    with capturedLogs() as events:
        (kept,) = load(plugins, skip_failing=True)
    assert kept.cls is Items
    (left,) = [event for event in events if event["log_level"].name == "critical"]
    assert left["plugin"] == "shop (distribution apid-shop)" and "shop_helpers" in left["error"]


def test_apids_own_controllers_are_never_left_out():
    with pytest.raises(PluginError, match="failed to load"):
        load([found("person", "apid", Broken(value="apid_person:Person"))], skip_failing=True)


def test_a_controller_whose_rules_are_refused_is_left_out_when_allowed(tmp_path):
    write_items(tmp_path, new_field)  # `colour`, which Items does not declare: refused
    with pytest.raises(IOStateError, match="field 'colour'"):
        bind([loaded(Items)], tmp_path, SECURITY)
    with capturedLogs() as events:
        bound = bind([loaded(Items)], tmp_path, SECURITY, skip_failing=True)
    assert "item" not in bound.controllers and "item" not in bound.rules.controllers
    (left,) = [event for event in events if event["log_level"].name == "critical"]
    assert "field 'colour'" in left["error"] and left["plugin"] == "item (distribution apid-inventory)"
