"""`apid new-plugin`, used as a plugin author uses it: the command writes a distribution, which
installs with pip (offline, into a virtualenv layered over the checkout's, so the rest of the
suite never sees it), migrates with `apid migrate`, is served by the daemon, and passes its own
generated tests, which run it through `apid.testing`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from harness import ADMIN, ADMIN_ACCOUNT, Daemon, deployment_with_accounts, wait_for
from shell_docs import OFFLINE_PIP, layered_venv

APID = [sys.executable, "-m", "apid"]


def new_plugin(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([*APID, "new-plugin", *args], capture_output=True, text=True, cwd=cwd, timeout=60)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(the plugin's folder, the interpreter of a virtualenv it is installed in, editable)."""
    root = tmp_path_factory.mktemp("new-plugin")
    done = new_plugin("inventory", "--controller", "item", cwd=root)
    assert done.returncode == 0, done.stderr
    folder = root / "apid-inventory"
    python = layered_venv(root / ".venv")
    installed = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "-e", str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **OFFLINE_PIP},
    )
    assert installed.returncode == 0, installed.stderr
    return folder, str(python)


def test_the_command_writes_a_whole_distribution(made):
    folder, _python = made
    written = sorted(
        str(path.relative_to(folder))
        for path in folder.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and ".egg-info" not in str(path)
    )
    assert written == [
        "README.md",
        "apid_inventory/__init__.py",
        "apid_inventory/iostate/item.json",
        "apid_inventory/item.py",
        "apid_inventory/migrations/0001_item.py",
        "apid_inventory/migrations/__init__.py",
        "apid_inventory/store.py",
        "pyproject.toml",
        "tests/test_item.py",
    ]
    assert 'item = "apid_inventory.item:ItemController"' in (folder / "pyproject.toml").read_text()
    assert 'inventory = "apid_inventory.migrations"' in (folder / "pyproject.toml").read_text()


def test_the_generated_tests_pass_as_generated(made):
    folder, python = made
    ran = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "6 passed" in ran.stdout


def test_it_migrates_and_the_daemon_serves_it(made, tmp_path):
    _folder, python = made
    deployment = deployment_with_accounts(tmp_path, accounts=(ADMIN_ACCOUNT,))
    migrated = deployment.cli("migrate", python=python)
    assert migrated.returncode == 0, migrated.stderr
    assert "apid: created the schema of plugin inventory (revision 0001)" in migrated.stdout
    # the first revision was generated from store.py: generating again finds nothing to add
    again = deployment.cli("migrate", "--generate", "inventory", "-m", "nothing new", python=python)
    assert again.returncode == 1 and "match the database: nothing to generate" in again.stderr
    assert deployment.cli("iostate", "check", python=python).returncode == 0

    daemon = Daemon(deployment, python=python).start()
    try:
        token = daemon.login(*ADMIN[:2])
        created = daemon.request("POST", "/v0.1/item/create", {"name": "a crate"}, token=token)
        assert created.status == 200, created.body
        assert created.json == {"id": 1, "name": "a crate", "version": 0}
        assert daemon.request("GET", "/v0.1/item/list", token=token).json == [created.json]
    finally:
        daemon.stop()


def test_a_rules_change_that_needs_new_code_waits_for_it(made, tmp_path):
    """Issue 27's version 2 of a plugin: its IO State adds `reorderLevel` while the daemon runs the
    code of version 1. The reload is refused (the command and SIGHUP), and an update sending the
    field is a 400, where it was a 200 that dropped the value."""
    folder, python = made
    deployment = deployment_with_accounts(tmp_path, accounts=(ADMIN_ACCOUNT,))
    assert deployment.cli("migrate", python=python).returncode == 0
    daemon = Daemon(deployment, python=python).start()
    try:
        token = daemon.login(*ADMIN[:2])
        assert daemon.request("POST", "/v0.1/item/create", {"name": "a crate"}, token=token).status == 200
        rules = json.loads((folder / "apid_inventory" / "iostate" / "item.json").read_text())
        rules["VALUES"]["reorderLevel"] = {"type": "Integer", "description": "Reorder below this many"}
        rules["VERSION"]["1"]["URI"]["update"]["REQUEST"]["permitAll"].append("reorderLevel")
        (deployment.root / "iostate" / "item.json").write_text(json.dumps(rules))
        refusal = (
            "controller item, version 1, action update, REQUEST permitAll: field 'reorderLevel' is not one the "
            "controller of item (distribution apid-inventory) stores or answers (it declares: id, max, name, "
            "offset, version)"
        )

        done = deployment.cli("iostate", "reload", python=python)
        assert done.returncode == 1 and refusal in done.stderr
        daemon.process.send_signal(signal.SIGHUP)
        assert wait_for(lambda: "IO State reload refused" in daemon.stderr) and refusal in daemon.stderr

        update = {"version": 0, "name": "a crate", "reorderLevel": 25}
        sent = daemon.request("PUT", "/v0.1/item/update/1", update, token=token)
        assert sent.status == 400
        assert sent.json["errors"] == [{"field": "reorderLevel", "reason": "is not a field of item"}]
        assert daemon.request("GET", "/v0.1/item/show/1", token=token).json["version"] == 0
    finally:
        daemon.stop()


@pytest.mark.parametrize(
    "args, reason",
    [
        (("Inventory",), "plugin name 'Inventory'"),
        (("apid",), "plugin name 'apid'"),
        (("inventory", "--controller", "class"), "controller name 'class'"),
        (("inventory", "--controller", "Item"), "controller name 'Item'"),
    ],
)
def test_names_that_cannot_make_a_plugin_are_refused_and_nothing_is_written(tmp_path, args, reason):
    done = new_plugin(*args, cwd=tmp_path)
    assert done.returncode == 1
    assert reason in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_folder_that_is_not_empty_is_left_alone(tmp_path):
    (tmp_path / "apid-inventory").mkdir()
    (tmp_path / "apid-inventory" / "notes.txt").write_text("mine")
    done = new_plugin("inventory", cwd=tmp_path)
    assert done.returncode == 1
    assert "exists and is not an empty folder" in done.stderr
    assert [path.name for path in (tmp_path / "apid-inventory").iterdir()] == ["notes.txt"]
