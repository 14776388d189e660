"""One daemon, one version of its code (apid.server.workers.versions): the code a worker starts
with is compared by content, not by version string, so that an edit to an editable install is
seen as a change as much as a new version is."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from apid.server.workers.versions import Code, code_changes, installed_code


def install(site: Path, name: str, version: str, package: str) -> Path:
    """A distribution providing a controller, as pip (or an editable install) leaves it."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[apid.controllers]\nthing = {package}.controller:Thing\n")
    code = site / package
    code.mkdir()
    (code / "__init__.py").write_text("")
    (code / "controller.py").write_text("class Thing:\n    pass\n")
    return code


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return tmp_path


def test_an_edited_module_of_an_editable_install_is_a_change_at_the_same_version(site):
    code = install(site, "apid-thing", "1.0", "apid_thing")
    before = installed_code()
    assert before["apid-thing"].version == "1.0"
    (code / "controller.py").write_text("class Thing:\n    answer = 42\n")
    after = installed_code()
    assert after["apid-thing"] == Code("1.0", after["apid-thing"].digest) != before["apid-thing"]
    assert after["apid"] == before["apid"]
    assert code_changes(before, after) == ["apid-thing 1.0: its code changed"]


def test_a_new_module_is_a_change_and_reading_again_is_not(site):
    code = install(site, "apid-thing", "1.0", "apid_thing")
    before = installed_code()
    assert code_changes(before, installed_code()) == []
    (code / "helpers.py").write_text("")
    assert code_changes(before, installed_code()) == ["apid-thing 1.0: its code changed"]


def test_a_distribution_whose_code_is_not_there_has_a_digest_of_nothing(site):
    install(site, "apid-thing", "1.0", "apid_thing")
    for path in (site / "apid_thing").iterdir():
        path.unlink()
    (site / "apid_thing").rmdir()
    importlib.invalidate_caches()
    assert installed_code()["apid-thing"].version == "1.0"
    assert "apid_thing" not in sys.modules


def test_each_change_is_one_phrase_by_distribution_name():
    started = {"apid": Code("0.2.0", "a"), "apid-old": Code("1.0", "b"), "apid-moved": Code("1.0", "c")}
    now = {"apid": Code("0.2.0", "a2"), "apid-new": Code("2.0", "d"), "apid-moved": Code("1.1", "c")}
    assert code_changes(started, now) == [
        "apid 0.2.0: its code changed",
        "apid-moved 1.0 -> 1.1",
        "apid-new 2.0 installed",
        "apid-old 1.0 removed",
    ]
