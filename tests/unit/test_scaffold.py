"""What `apid new-plugin` writes, read without installing it (tests/integration/test_new_plugin.py
installs, migrates, serves and tests it): its words, its IO State roles, and that its controller
declares every field its IO State names."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from apid.config.files import load_api
from apid.plugin_host.discovery import FoundPlugin, bind, load
from apid.plugin_host.field_declarations import Declared, declared_fields
from apid.plugin_host.scaffold import PluginNames, write_plugin

ROOT = Path(__file__).resolve().parents[2]
SECURITY = load_api(ROOT / "etc" / "service_api.yml", ROOT).security


@pytest.mark.parametrize(
    "controller, said",
    [
        ("item", "an item"),
        ("order", "an order"),
        ("update", "an update"),
        ("team", "a team"),
        ("user", "a user"),
        ("unit", "a unit"),
        ("one_time", "a one_time"),
        ("euro", "a euro"),
    ],
)
def test_a_controller_is_named_with_its_article(controller, said):
    assert PluginNames.of("inventory", controller).placeholders()["a_controller"] == said


@pytest.fixture
def written(tmp_path) -> Path:
    write_plugin(PluginNames.of("inventory", "item"), tmp_path / "apid-inventory")
    return tmp_path / "apid-inventory"


def test_the_io_state_speaks_of_an_item_and_lets_its_readers_batch_the_list(written):
    rules = json.loads((written / "apid_inventory" / "iostate" / "item.json").read_text())
    uri = rules["VERSION"]["1"]["URI"]
    assert [uri[action]["DESCRIPTION"] for action in ("create", "update", "delete")] == [
        "Create an item",
        "Rename an item, as of the version read",
        "Delete an item",
    ]
    assert uri["list"]["ROLES"]["BATCH"] == uri["list"]["ROLES"]["DEFAULT"] == ["ROLE_ADMIN", "ROLE_USER"]


def test_the_readme_links_nowhere_it_does_not_mean(written):
    assert "https://github.com/)" not in (written / "README.md").read_text()


@pytest.fixture
def importable(written, monkeypatch):
    """The written package importable as `apid_inventory`, and forgotten afterwards."""
    monkeypatch.syspath_prepend(str(written))
    yield
    for module in [name for name in sys.modules if name.split(".")[0] == "apid_inventory"]:
        del sys.modules[module]


class Entry:
    value = "apid_inventory.item:ItemController"

    def load(self):
        from apid_inventory.item import ItemController

        return ItemController


def test_the_controller_declares_every_field_its_io_state_names(importable, tmp_path):
    (item,) = load([FoundPlugin(name="item", distribution="apid-inventory", entry_point=Entry())])
    assert declared_fields(item.cls) == Declared(frozenset({"id", "version", "name", "offset", "max"}), strict=True)
    assert "item" in bind([item], tmp_path / "none", SECURITY).rules.controllers  # the file it ships
