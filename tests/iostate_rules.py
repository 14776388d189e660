"""What a set of roles may call, worked out from the IO State files as written, on their own.

The API docs tests compare `apidoc/show` and `/openapi.json` against this: it reads the raw
JSON (DEFAULT missing means the network group's roles, `permitAll` plus each role's own list)
without any of the daemon's code, so a mistake in the daemon cannot hide in its expectation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
SAMPLE_TEAM = REPO / "tests/sample_plugin/apid_sample/iostate/team.json"


@dataclass(frozen=True)
class Expected:
    method: str
    request: frozenset[str]
    response: frozenset[str]
    batch: bool
    hook: bool


def network_roles(api_yml: Path = REPO / "etc/service_api.yml") -> dict[str, list[str]]:
    return yaml.safe_load(api_yml.read_text())["security"]["networkRoles"]


def read_states(*folders_or_files: Path) -> list[dict]:
    """The inner IOSTATE objects of the files (every *.json of a folder)."""
    states = []
    for place in folders_or_files:
        for path in sorted(place.glob("*.json")) if place.is_dir() else [place]:
            document = json.loads(path.read_text())
            states.append(document.get("IOSTATE", document))
    return states


def open_fields(entry: dict, member: str, roles: set[str]) -> frozenset[str]:
    """The fields of an action's REQUEST or RESPONSE (`member`) open to any of `roles`."""
    lists = entry.get(member, {})
    return frozenset(lists.get("permitAll", [])).union(*(lists.get(role, []) for role in roles))


def expected_calls(
    states: list[dict], roles: set[str], groups: dict[str, list[str]]
) -> dict[tuple[str, str, str], Expected]:
    """(controller, API version, action) -> what `roles` may do with it, for every action any of
    them may call."""
    calls = {}
    for state in states:
        for version, block in state["VERSION"].items():
            for action, entry in block["URI"].items():
                declared = entry.get("ROLES", {})
                admitted = set(declared.get("DEFAULT") or groups[state["NETWORKGRP"]]) & roles
                if not admitted:
                    continue
                calls[(state["NAME"], str(version), action)] = Expected(
                    method=entry["METHOD"].upper(),
                    request=open_fields(entry, "REQUEST", admitted),
                    response=open_fields(entry, "RESPONSE", admitted),
                    batch=bool(set(declared.get("BATCH", [])) & roles),
                    hook=bool(set(declared.get("HOOK", [])) & roles),
                )
    return calls


def documented_calls(document: dict) -> dict[tuple[str, str, str], Expected]:
    """The same, read from an `apidoc/show` answer."""
    calls = {}
    for controller, described in document["controllers"].items():
        for version, block in described["versions"].items():
            for action, entry in block["actions"].items():
                calls[(controller, version, action)] = Expected(
                    method=entry["method"],
                    request=frozenset(entry["request"]),
                    response=frozenset(entry["response"]),
                    batch=entry["batch"],
                    hook=entry["hook"],
                )
    return calls


def current_versions(states: list[dict]) -> dict[str, str]:
    return {state["NAME"]: str(state["CURRENTSTABLE"]) for state in states}


# The sample plugin's actions that await asyncio (`@action(asyncio=True)`): in no document of a
# deployment on another reactor
ASYNCIO_ONLY = frozenset({("team", "audit"), ("team", "relay")})


def expected_api_paths(
    states: list[dict], roles: set[str], groups: dict[str, list[str]], app: str, asyncio: bool = False
) -> set[tuple[str, str]]:
    """(path, method) of every plain, batch and chain operation an OpenAPI document of `roles`
    must hold, and no other API operation; on an `asyncio` reactor, those awaiting it too."""
    current = current_versions(states)
    calls = {
        key: expected
        for key, expected in expected_calls(states, roles, groups).items()
        if asyncio or (key[0], key[2]) not in ASYNCIO_ONLY
    }
    non_safe = {e.method for e in calls.values() if e.method != "GET"}
    paths = set()
    for (controller, version, action), expected in calls.items():
        suffix = "" if current[controller] == version else f"-{version}"
        plain = f"/v{app}{suffix}/{controller}/{action}"
        by_id = "id" in expected.request
        paths.add((plain, expected.method.lower()))
        if by_id:
            paths.add((plain + "/{id}", expected.method.lower()))
        if expected.batch:
            paths.add((f"/b{app}{suffix}/{controller}/{action}", "post"))
        chain = f"/c{app}{suffix}/{controller}/{action}" + ("/{id}" if by_id else "")
        # a chain starting with a GET is published as POST (a blankchain) and as each non-safe method
        methods = {"POST", *non_safe} if expected.method == "GET" else {expected.method}
        paths |= {(chain, method.lower()) for method in methods}
    return paths
