"""A plugin's settings reach its controller and its start-up and shutdown hooks run in order,
through the testing kit (`InMemoryApid` reads and starts them as the daemon does; the daemon's
own are tested in tests/integration/test_plugin_lifecycle.py)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

import apid.testing
from apid.config.nodes import ConfigError
from apid.plugin import Call, Controller, action, setting, settings
from apid.plugin_host.lifecycle import HookFailed
from apid.testing import InMemoryApid
from apid_sample import TeamController

ROOT = Path(__file__).resolve().parents[2]
ORDER: list[str] = []


@settings
class GreeterSettings:
    greeting: str = setting("greeting", default="hello", doc="What `say` answers.")
    loud: bool = setting("style.loud", default=False, doc="Whether it shouts.")


class Greeter(Controller):
    name = "greeter"
    settings_class = GreeterSettings
    settings: GreeterSettings

    async def started(self) -> None:
        ORDER.append("started greeter")

    async def stopping(self) -> None:
        ORDER.append("stopping greeter")

    @action
    async def say(self, call: Call) -> dict[str, Any]:
        words = self.settings.greeting.upper() if self.settings.loud else self.settings.greeting
        return {"id": 1, "greeting": words}


class Audit(Controller):
    """No settings; named before `greeter`, so started before it and stopped after it."""

    name = "audit"
    fails = False

    async def started(self) -> None:
        if self.fails:
            raise RuntimeError("the audit service said no")
        ORDER.append("started audit")

    async def stopping(self) -> None:
        ORDER.append("stopping audit")

    @action
    async def say(self, call: Call) -> dict[str, Any]:
        return {"id": 1, "greeting": "audited"}


def iostate(name: str) -> dict[str, Any]:
    return {
        "NAME": name,
        "NETWORKGRP": "public",
        "VALUES": {
            "id": {"type": "Long", "key": "PKEY", "description": "Nothing", "mockData": "1"},
            "greeting": {"type": "String", "description": "Words", "mockData": "hello"},
        },
        "CURRENTSTABLE": "1",
        "VERSION": {
            "1": {
                "DEFAULTACTION": "say",
                "URI": {
                    "say": {
                        "METHOD": "GET",
                        "DESCRIPTION": "Says it",
                        "REQUEST": {},
                        "RESPONSE": {"permitAll": ["id", "greeting"]},
                    }
                },
            }
        },
    }


@pytest.fixture
def rules(tmp_path) -> Path:
    """The shipped IO State files, with the two controllers'."""
    for shipped in (ROOT / "iostate").glob("*.json"):
        shutil.copy(shipped, tmp_path)
    for name in ("greeter", "audit"):
        (tmp_path / f"{name}.json").write_text(json.dumps(iostate(name)))
    return tmp_path


@pytest.fixture(autouse=True)
def order():
    ORDER.clear()
    yield ORDER
    ORDER.clear()


def say(kit: InMemoryApid, name: str) -> str:
    reply = kit.get(f"/v{kit.version}/{name}/say", caller=kit.caller("ROLE_USER"))
    assert reply.status == 200, reply.problem
    return reply.json["greeting"]


def test_a_setting_reaches_its_controller(rules):
    plugin_settings = {"greeter": {"greeting": "good morning", "style": {"loud": True}}}
    with InMemoryApid([Greeter, Audit], iostate_dir=rules, plugin_settings=plugin_settings) as kit:
        assert say(kit, "greeter") == "GOOD MORNING"


def test_settings_left_out_take_their_defaults(rules):
    with InMemoryApid([Greeter, Audit], iostate_dir=rules) as kit:
        assert say(kit, "greeter") == "hello"


def test_the_sample_plugins_setting_reaches_it():
    with InMemoryApid([TeamController], plugin_settings={"team": {"defaultBudget": 7}}) as kit:
        admin = kit.caller("ROLE_ADMIN")
        created = kit.post(f"/v{kit.version}/team/create", {"name": "Core", "leaderId": admin.id}, caller=admin)
        assert created.status == 200, created.problem
        assert created.json["budget"] == 7


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"greeter": {"greting": "hi"}}, r"test\.plugins\.greeter\.greting: unknown key; allowed here: greeting, styl"),
        ({"greeter": {"style": {"loud": "yes"}}}, r"test\.plugins\.greeter\.style\.loud: expected true or false"),
        ({"audit": {"url": "x"}}, r"test\.plugins\.audit: controller 'audit' declares no settings"),
        ({"nobody": {}}, r"test\.plugins\.nobody: no plugin installed provides a controller named 'nobody'"),
    ],
)
def test_a_bad_setting_stops_the_start_naming_the_file_the_line_and_the_key(rules, given, message):
    with pytest.raises(ConfigError, match=r"service_server\.yml:\d+: " + message):
        InMemoryApid([Greeter, Audit], iostate_dir=rules, plugin_settings=given)
    assert ORDER == []  # no hook ran


def test_hooks_run_in_the_order_of_the_names_and_stop_in_the_reverse(rules, order):
    with InMemoryApid([Greeter, Audit], iostate_dir=rules):
        assert order == ["started audit", "started greeter"]
    assert order == ["started audit", "started greeter", "stopping greeter", "stopping audit"]


def test_a_failing_start_up_hook_stops_the_start_naming_the_plugin(rules, order, monkeypatch):
    """The plugin is not installed: its package names it. The kit raises a class it exports."""
    monkeypatch.setattr(Audit, "fails", True)
    package = __name__.partition(".")[0]
    failed = f"plugin audit (distribution {package}): started() failed: RuntimeError: the audit service said no"
    with pytest.raises(apid.testing.PluginError, match=re.escape(failed)) as raised:
        InMemoryApid([Greeter, Audit], iostate_dir=rules)
    assert isinstance(raised.value, HookFailed)
    assert order == []  # greeter, after it, never started


class Shared(Controller):
    """One httpx client for every call, opened and closed by the hooks, under asyncio."""

    name = "greeter"
    client: httpx.AsyncClient
    closed: ClassVar[list[bool]] = []

    async def started(self) -> None:
        self.client = httpx.AsyncClient(transport=httpx.MockTransport(lambda _: httpx.Response(200, text="hi")))
        await asyncio.sleep(0.01)  # asyncio itself: the hook runs in the kit's loop

    async def stopping(self) -> None:
        await self.client.aclose()
        self.closed.append(self.client.is_closed)

    @action
    async def say(self, call: Call) -> dict[str, Any]:
        reply = await self.client.get("http://upstream.example/greeting")
        return {"id": 1, "greeting": reply.text}


def test_hooks_open_and_close_a_shared_client_under_asyncio(rules):
    with InMemoryApid([Shared, Audit], iostate_dir=rules, reactor="asyncio") as kit:
        assert say(kit, "greeter") == "hi"
        assert say(kit, "greeter") == "hi"
    assert Shared.closed == [True]
