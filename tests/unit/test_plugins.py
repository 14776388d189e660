"""Plugins (DESIGN 4.13): discover -> load -> bind, every error naming the distribution."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest

from apid.config.files import load_api
from apid.iostate import IOStateError
from apid.plugin import Call, Controller, action
from apid.plugin_host.discovery import GROUP, FoundPlugin, LoadedController, PluginError, bind, discover, load
from apid.plugin_host.migrations import MIGRATIONS_GROUP, MigrationSource, migration_sources

ROOT = Path(__file__).resolve().parents[2]
SECURITY = load_api(ROOT / "etc" / "service_api.yml", ROOT).security
TEAM_JSON = json.loads((ROOT / "tests/sample_plugin/apid_sample/iostate/team.json").read_text())


@dataclass(frozen=True)
class FakeEntryPoint:
    """An entry point with a distribution: a hand-made EntryPoint has `dist` None."""

    name: str
    value: str
    dist: SimpleNamespace | None
    group: str = GROUP

    def load(self):
        return metadata.EntryPoint(self.name, self.value, self.group).load()


def ep(name: str, value: str, distribution: str) -> FakeEntryPoint:
    return FakeEntryPoint(name, value, SimpleNamespace(name=distribution))


def found(name: str, value: str, distribution: str) -> FoundPlugin:
    return FoundPlugin(name=name, distribution=distribution, entry_point=ep(name, value, distribution))


NotAController = object()


class Nameless(Controller):
    @action
    def show(self, call: Call) -> dict:
        return {}


class TeamWithoutCreate(Controller):
    name = "team"

    @action
    def show(self, call: Call) -> dict:
        return {}

    @action
    def list(self, call: Call) -> list:
        return []


class Lonely(Controller):
    name = "lonely"

    @action
    def show(self, call: Call) -> dict:
        return {}


def loaded_team() -> list[LoadedController]:
    return load([found("team", "apid_sample:TeamController", "apid-sample-plugin")])


def loaded_team_and_person(iostate_dir: Path) -> list[LoadedController]:
    """Team's leaderId is an FKEY to person, so binding team needs person beside it."""
    shutil.copy(ROOT / "iostate" / "person.json", iostate_dir / "person.json")
    return loaded_team() + load([found("person", "apid_person:PersonController", "apid")])


def write_state(directory: Path, filename: str, document: dict) -> Path:
    path = directory / filename
    path.write_text(json.dumps(document))
    return path


# --- discover ---------------------------------------------------------------------------------


def test_discover_sorts_by_controller_name():
    plugins = discover([ep("team", "a:B", "d1"), ep("alpha", "a:C", "d2"), ep("person", "a:D", "d3")])
    assert [(p.name, p.distribution) for p in plugins] == [("alpha", "d2"), ("person", "d3"), ("team", "d1")]


def test_discover_counts_a_distribution_and_name_pair_once():
    first = ep("team", "first:Team", "dist")
    plugins = discover([first, ep("team", "second:Team", "dist")])
    assert len(plugins) == 1
    assert plugins[0].entry_point is first


def test_discover_keeps_the_same_name_from_two_distributions():
    plugins = discover([ep("team", "a:B", "zeta"), ep("team", "a:B", "alpha")])
    assert [p.distribution for p in plugins] == ["alpha", "zeta"]


def test_discover_names_an_entry_point_without_distribution_unknown():
    (plugin,) = discover([metadata.EntryPoint("team", "a:B", GROUP)])
    assert plugin.distribution == "unknown"
    assert plugin.label == "team (distribution unknown)"


def test_discover_finds_the_installed_plugins():
    pairs = {(p.name, p.distribution) for p in discover()}
    assert {("person", "apid"), ("team", "apid-sample-plugin")} <= pairs


# --- load -------------------------------------------------------------------------------------


def test_load_imports_the_controller_classes():
    from apid_sample import TeamController

    (team,) = loaded_team()
    assert team.cls is TeamController
    assert team.plugin.distribution == "apid-sample-plugin"


def test_load_refuses_an_import_error_naming_the_distribution():
    with pytest.raises(PluginError, match=r"ghost \(distribution ghost-dist\) failed to load: ModuleNotFoundError"):
        load([found("ghost", "apid_no_such_module:Ghost", "ghost-dist")])


def test_load_refuses_an_object_that_is_not_a_controller():
    value = f"{__name__}:NotAController"
    with pytest.raises(
        PluginError, match=r"odd \(distribution odd-dist\): .*NotAController is not an apid.plugin.Controller"
    ):
        load([found("odd", value, "odd-dist")])


def test_load_refuses_a_plain_class_that_is_not_a_controller_subclass():
    with pytest.raises(PluginError, match=r"distribution odd-dist.*is not an apid.plugin.Controller"):
        load([found("odd", "apid.plugin:Caller", "odd-dist")])


def test_load_refuses_a_controller_without_a_name():
    with pytest.raises(PluginError, match=r"anon \(distribution anon-dist\): Nameless sets no controller name"):
        load([found("anon", f"{__name__}:Nameless", "anon-dist")])


def test_load_refuses_two_plugins_providing_the_same_controller():
    plugins = [
        found("team", "apid_sample:TeamController", "first-dist"),
        found("team2", "apid_sample:TeamController", "second-dist"),
    ]
    with pytest.raises(PluginError) as caught:
        load(plugins)
    assert str(caught.value) == (
        "plugin team2 (distribution second-dist): controller 'team' is already provided by "
        "team (distribution first-dist)"
    )


# --- bind -------------------------------------------------------------------------------------


def test_bind_uses_the_io_state_shipped_in_the_plugin_package(tmp_path):
    bound = bind(loaded_team_and_person(tmp_path), tmp_path, SECURITY)
    team = bound.rules.controller("team")
    assert team.source == "apid_sample:iostate/team.json"
    assert set(team.versions) == {"1", "2"}
    assert bound.controllers["team"].plugin.distribution == "apid-sample-plugin"


def test_bind_lets_a_same_name_file_in_the_iostate_dir_override_the_shipped_one(tmp_path):
    document = dict(TEAM_JSON, VERSION={"2": TEAM_JSON["VERSION"]["2"]}, CURRENTSTABLE="2")
    path = write_state(tmp_path, "my-teams.json", document)

    team = bind(loaded_team_and_person(tmp_path), tmp_path, SECURITY).rules.controller("team")

    assert team.source == str(path)
    assert set(team.versions) == {"2"}


def test_bind_refuses_an_fkey_reference_to_a_controller_that_is_not_installed(tmp_path):
    refusal = "field leaderId: FKEY reference 'person.id' is not an installed controller"
    with pytest.raises(IOStateError, match=re.escape(refusal)):
        bind(loaded_team(), tmp_path, SECURITY)


def test_bind_refuses_a_file_in_the_iostate_dir_with_no_controller(tmp_path):
    write_state(tmp_path, "ghost.json", dict(TEAM_JSON, NAME="ghost"))
    with pytest.raises(IOStateError, match=re.escape("ghost.json: no installed plugin provides controller 'ghost'")):
        bind(loaded_team(), tmp_path, SECURITY)


def test_bind_refuses_a_controller_with_no_io_state(tmp_path):
    lonely = LoadedController(plugin=found("lonely", "x:Lonely", "lonely-dist"), cls=Lonely)
    with pytest.raises(PluginError, match=r"lonely \(distribution lonely-dist\): controller 'lonely' has no IO State"):
        bind([lonely], tmp_path, SECURITY)


def test_bind_refuses_an_io_state_action_the_controller_does_not_implement(tmp_path):
    write_state(tmp_path, "team.json", TEAM_JSON)
    team = LoadedController(plugin=found("team", "x:T", "thin-dist"), cls=TeamWithoutCreate)
    with pytest.raises(
        IOStateError,
        match=re.escape(
            "action create: the controller of team (distribution thin-dist) implements no such action "
            "(it has: list, show)"
        ),
    ):
        bind([team], tmp_path, SECURITY)


def test_bind_shares_cached_answers_only_of_actions_declared_caller_independent(tmp_path):
    loaded = loaded_team_and_person(tmp_path)
    team = json.loads(json.dumps(TEAM_JSON))
    team["VERSION"]["1"]["URI"]["show"]["CACHE"] = {"maxAge": 60, "shared": True}  # declared by the plugin
    write_state(tmp_path, "team.json", team)
    assert bind(loaded, tmp_path, SECURITY).rules.controller("team").versions["1"].endpoints["show"].cache.shared

    person = json.loads((tmp_path / "person.json").read_text())
    person["IOSTATE"]["VERSION"]["1"]["URI"]["show"]["CACHE"] = {"maxAge": 60, "shared": True}  # own record only
    write_state(tmp_path, "person.json", person)
    with pytest.raises(
        IOStateError,
        match=re.escape(
            f'{tmp_path / "person.json"}: controller person, version 1, action show, CACHE: "shared": true is '
            "refused: the controller of person (distribution apid) does not declare show caller-independent"
        ),
    ):
        bind(loaded, tmp_path, SECURITY)


def test_bind_refuses_a_single_module_plugin_with_no_io_state(tmp_path, monkeypatch):
    (tmp_path / "apid_unit_single_module.py").write_text(
        "from apid.plugin import Controller, action\n"
        "class Solo(Controller):\n"
        "    name = 'solo'\n"
        "    @action\n"
        "    def show(self, call):\n"
        "        return {}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded = load([found("solo", "apid_unit_single_module:Solo", "solo-dist")])
    with pytest.raises(PluginError, match=r"solo \(distribution solo-dist\): controller 'solo' has no IO State"):
        bind(loaded, tmp_path / "iostate", SECURITY)


# --- migration sources (entry point group apid.migrations) --------------------------------------

DIRECTORY = ROOT / "docs" / "examples" / "apid-directory"


def migrations(name: str, package: str, distribution: str) -> FakeEntryPoint:
    return FakeEntryPoint(name, package, SimpleNamespace(name=distribution), MIGRATIONS_GROUP)


@pytest.fixture
def directory_on_path(monkeypatch):
    """The example plugin importable without installing it (only its package is needed)."""
    monkeypatch.syspath_prepend(str(DIRECTORY))


def test_migration_sources_find_each_package_folder_sorted_by_name(directory_on_path):
    sources = migration_sources(
        [
            migrations("directory", "apid_directory.migrations", "apid-directory"),
            migrations("audit", "apid.store.migrations", "apid-audit"),
        ]
    )
    assert [(s.name, s.distribution, s.package) for s in sources] == [
        ("audit", "apid-audit", "apid.store.migrations"),
        ("directory", "apid-directory", "apid_directory.migrations"),
    ]
    assert sources[1].folder == DIRECTORY / "apid_directory" / "migrations"
    assert sources[1].version_table == "alembic_version_directory"
    assert sources[1] == MigrationSource.from_package("directory", "apid_directory.migrations", "apid-directory")


def test_migration_sources_count_a_distribution_seen_twice_on_sys_path_once(directory_on_path):
    twice = [migrations("directory", "apid_directory.migrations", "apid-directory")] * 2
    assert [s.name for s in migration_sources(twice)] == ["directory"]


def test_migration_sources_refuse_two_distributions_with_one_name(directory_on_path):
    with pytest.raises(
        PluginError,
        match=r"plugin directory \(distribution other-dist\): migrations named "
        r"'directory' are already provided by directory \(distribution apid-directory\)",
    ):
        migration_sources(
            [
                migrations("directory", "apid_directory.migrations", "apid-directory"),
                migrations("directory", "apid.store.migrations", "other-dist"),
            ]
        )


@pytest.mark.parametrize("name", ["apid", "Directory", "2nd", "a-b", "x" * 48])
def test_a_migration_name_must_make_a_plain_version_table_name(name):
    with pytest.raises(PluginError, match=rf"plugin {name} \(distribution d\): the migrations' name must be"):
        MigrationSource.from_package(name, "apid.store.migrations", "d")


def test_a_migrations_package_that_does_not_import_names_the_distribution():
    with pytest.raises(
        PluginError,
        match=r"plugin directory \(distribution apid-directory\): migrations package "
        r"apid_nowhere.migrations failed to load: ModuleNotFoundError",
    ):
        migration_sources([migrations("directory", "apid_nowhere.migrations", "apid-directory")])


def test_a_migrations_module_that_is_not_a_package_is_refused():
    with pytest.raises(PluginError, match=r"migrations package apid.plugin_host.discovery failed to load: TypeError"):
        MigrationSource.from_package("directory", "apid.plugin_host.discovery", "apid-directory")


def test_the_example_plugin_with_tables_is_not_installed_in_the_checkouts_venv():
    """Only tests/integration/test_plugin_migrations.py installs it, into a venv of its own."""
    assert "directory" not in {source.name for source in migration_sources()}
