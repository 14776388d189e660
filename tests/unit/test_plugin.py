"""`apid.plugin` stands above the daemon: it imports nothing of it but the problems, and the
daemon's own classes keep the protocols it names, so a plugin written against the face runs
against the real services."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import subprocess
import sys
from typing import Any

import pytest

import apid.accounts
import apid.config
import apid.hooks.service
import apid.iostate
import apid.ping
import apid.plugin
import apid.problems
import apid.store.database
from apid import plugin

KEPT_BY = [
    (plugin.Database, apid.store.database.Database),
    (plugin.UnitOfWork, apid.store.database.Database),
    (plugin.UnitOfWork, plugin.Call),
    (plugin.Accounts, apid.accounts.Accounts),
    (plugin.Account, apid.accounts.Account),
    (plugin.SecuritySettings, apid.config.SecurityConfig),
    (plugin.PeerPinger, apid.ping.PeerPinger),
    (plugin.Hooks, apid.hooks.service.Hooks),
    (plugin.Endpoint, apid.iostate.Endpoint),
    (plugin.RuleSet, apid.iostate.RuleSet),
]
POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def protocol_members(protocol: type) -> set[str]:
    """The members it declares or takes from the plugin API's other protocols (not `Protocol`'s)."""
    own = [cls for cls in protocol.__mro__ if getattr(cls, "_is_protocol", False) and cls.__module__ == plugin.__name__]
    return {name for cls in own for name in vars(cls) if not name.startswith("_")}


def refusals(wanted: inspect.Signature, found: inspect.Signature) -> list[str]:
    """What a call the protocol allows would find refused by `found`, by parameter."""
    want, have = list(wanted.parameters.values()), dict(found.parameters)
    kinds = {p.kind for p in have.values()}
    refused = []
    positional = [p.name for p in have.values() if p.kind in POSITIONAL]
    wanted_positional = [p.name for p in want if p.kind in POSITIONAL]
    if positional[: len(wanted_positional)] != wanted_positional:
        refused.append(f"positional parameters {positional}, not {wanted_positional}")
    for p in want:
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            if p.kind not in kinds:
                refused.append(f"no variadic {p.name}")
        elif p.name not in have and inspect.Parameter.VAR_KEYWORD not in kinds:
            refused.append(f"no parameter {p.name}")
        elif p.name in have and p.default is not p.empty and have[p.name].default is p.empty:
            refused.append(f"{p.name} has no default")
    refused += [
        f"{p.name} is required"
        for p in have.values()
        if p.name not in wanted.parameters
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        and p.default is inspect.Parameter.empty
    ]
    return refused


def mismatches(protocol: type, real: type) -> list[str]:
    """Every member of `protocol` that `real` lacks or declares incompatibly."""
    fields = {field.name for field in dataclasses.fields(real)} if dataclasses.is_dataclass(real) else set()
    found_mismatches = []
    for name in sorted(protocol_members(protocol)):
        wanted, found = inspect.getattr_static(protocol, name), inspect.getattr_static(real, name, None)
        if isinstance(wanted, property):
            if name not in fields and found is None:
                found_mismatches.append(f"{name}: missing")
        elif not inspect.isfunction(found):
            found_mismatches.append(f"{name}: missing")
        elif inspect.iscoroutinefunction(wanted) and not inspect.iscoroutinefunction(found):
            found_mismatches.append(f"{name}: not a coroutine function")
        else:
            found_mismatches += [
                f"{name}: {refused}" for refused in refusals(inspect.signature(wanted), inspect.signature(found))
            ]
    return found_mismatches


@pytest.mark.parametrize("protocol, real", KEPT_BY, ids=lambda cls: cls.__qualname__)
def test_the_daemons_classes_keep_the_protocols_of_the_plugin_api(protocol: type, real: type):
    assert protocol_members(protocol)
    assert mismatches(protocol, real) == []


def test_the_check_finds_a_member_missing_or_called_otherwise():
    class Elsewhere:
        async def ping(self, caller: Any) -> dict[str, Any]: ...

    class Otherwise:
        def write(self, work: Any, unit: Any) -> Any: ...

        def read(self, work: Any) -> Any: ...

    assert mismatches(plugin.PeerPinger, Elsewhere) == ["ping_all: missing"]
    assert mismatches(plugin.Database, Otherwise) == [
        "prepare: missing",
        "read: no variadic args",
        "select: missing",
        "write: no variadic args",
        "write: unit is required",
    ]


def test_importing_the_plugin_api_imports_nothing_of_the_daemon_but_its_problems():
    listing = "import sys, apid.plugin; print(*sorted(m for m in sys.modules if m.partition('.')[0] == 'apid'))"
    imported = subprocess.run([sys.executable, "-c", listing], capture_output=True, text=True, check=True).stdout
    assert imported.split() == ["apid", "apid.plugin", "apid.problems"]


@pytest.mark.parametrize(
    "module, allowed", [(apid.plugin, {"apid.problems"}), (apid.problems, set())], ids=["plugin", "problems"]
)
def test_the_plugin_api_names_no_module_of_the_daemon_even_for_types(module: Any, allowed: set[str]):
    tree = ast.parse(inspect.getsource(module))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert {name for name in imported if name.partition(".")[0] == "apid"} == allowed
