"""`apid.plugin` stands above the daemon: it imports nothing of it but the problems, the
declaration of settings (apid.config.plugin_settings over apid.config.settings) and the account
policy (apid.config.account_policy), which import nothing else. That the
daemon's own classes keep the protocols it names is checked by mypy (`make check`), in
tests/plugin_face.py; `apid` ships `py.typed`, so plugins' own type checks see the face too."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from importlib import resources
from typing import Any

import pytest

import apid.config.account_policy
import apid.config.nodes
import apid.config.plugin_settings
import apid.config.settings
import apid.declarations.actions
import apid.plugin
import apid.problems


def test_importing_the_plugin_api_imports_nothing_of_the_daemon_but_its_problems_and_settings():
    listing = "import sys, apid.plugin; print(*sorted(m for m in sys.modules if m.partition('.')[0] == 'apid'))"
    imported = subprocess.run([sys.executable, "-c", listing], capture_output=True, text=True, check=True).stdout
    assert imported.split() == [
        "apid",
        "apid.config",
        "apid.config.account_policy",
        "apid.config.nodes",
        "apid.config.plugin_settings",
        "apid.config.settings",
        "apid.declarations",
        "apid.declarations.actions",
        "apid.plugin",
        "apid.problems",
    ]


@pytest.mark.parametrize(
    "module, allowed",
    [
        (
            apid.plugin,
            {"apid.problems", "apid.config.plugin_settings", "apid.config.account_policy", "apid.declarations.actions"},
        ),
        (apid.declarations.actions, {"apid.problems"}),
        (apid.problems, set()),
        (apid.config.account_policy, {"apid.problems"}),
        (apid.config.plugin_settings, {"apid.config.nodes", "apid.config.settings"}),
        (apid.config.settings, {"apid.config.nodes"}),
        (apid.config.nodes, set()),
    ],
    ids=["plugin", "actions", "problems", "account_policy", "plugin_settings", "settings", "nodes"],
)
def test_the_plugin_api_names_no_module_of_the_daemon_even_for_types(module: Any, allowed: set[str]):
    tree = ast.parse(inspect.getsource(module))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert {name for name in imported if name.partition(".")[0] == "apid"} == allowed


def test_apid_ships_its_types():
    """PEP 561: without the marker, a plugin's type checker treats every import of apid as Any."""
    assert resources.files("apid").joinpath("py.typed").is_file()
