"""Rewriting an IO State file of the original framework into apid's form (`apid iostate convert`).

The loader stays strict, so that a typo in a file written for apid is an error; the original
framework's files differ in spelling (`networkGrp`, `defaultAction`, `PRIMARY`, `""` for an
empty list), carry members it ignored (`_DEPRECATED`, `testOrder`) and lean on defaults apid
does not have. Converting is explicit and reports each change, so an operator sees what apid
reads differently. Whatever the conversion cannot decide is left for the loader to refuse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from apid.config.api import SecurityConfig
from apid.iostate.loader import EVERY_FIELD, FIELD_MEMBERS, PERMIT_ALL

IGNORED = frozenset({"TESTORDER"})  # worked out by the original framework from the keys; apid needs none
KEY_NAMES = {"PRIMARY": "PKEY", "FOREIGN": "FKEY"}  # the Grails dialect's keys
KEY_TYPES = ("PKEY", "FKEY", "INDEX")  # written as a `type` in the Grails dialect: a Long key
SELF = "self"  # the Grails dialect's reference to the file's own controller
ORIGINAL_GROUP = "public"  # NETWORKGRP when the original file leaves it out
ORIGINAL_ACTION = "index"  # DEFAULTACTION when the original file leaves it out


@dataclass
class Conversion:
    """The file in apid's form, and one line per change: where, then what."""

    document: Any
    changes: list[str] = field(default_factory=list)

    def note(self, where: str, what: str) -> None:
        self.changes.append(f"{where}: {what}" if where else what)


def convert(document: Any, security: SecurityConfig) -> Conversion:
    """The original framework's `document` in apid's form; anything not a JSON object is left
    as it is for the loader to refuse."""
    done = Conversion(document)
    if not isinstance(document, dict):
        return done
    if len(document) == 1 and next(iter(document)).upper() == "IOSTATE":
        wrapper = next(iter(document))
        if wrapper != "IOSTATE":
            done.note("", f"renamed {wrapper!r} to 'IOSTATE'")
        if isinstance(document[wrapper], dict):
            done.document = {"IOSTATE": _controller(document[wrapper], security, done)}
        return done
    done.document = _controller(document, security, done)
    return done


def _controller(raw: dict, security: SecurityConfig, done: Conversion) -> dict:
    state = _upper_members(raw, "", done)
    name = state.get("NAME")
    where = f"controller {name}"
    if "NETWORKGRP" not in state:
        state["NETWORKGRP"] = ORIGINAL_GROUP
        done.note(where, f"added NETWORKGRP {ORIGINAL_GROUP!r} (the original framework's default)")
    if isinstance(state.get("VALUES"), dict):
        state["VALUES"] = _values(state["VALUES"], name, where, done)
    group_roles = security.network_roles.get(state["NETWORKGRP"])
    if isinstance(state.get("VERSION"), dict):
        state["VERSION"] = {
            version: _version(block, group_roles, f"{where}, version {version}", done)
            if isinstance(block, dict)
            else block
            for version, block in state["VERSION"].items()
        }
    return state


def _upper_members(raw: dict, where: str, done: Conversion) -> dict:
    """`raw` with its members in upper case, as apid writes them at this level (`networkGrp`
    is NETWORKGRP), and without the members the original framework ignored."""
    out = {}
    for member, value in raw.items():
        if member.startswith("_") or member.upper() in IGNORED:
            done.note(where, f"removed {member!r} (the original framework ignores it)")
            continue
        spelled = member.upper()
        if spelled != member and spelled not in raw:
            done.note(where, f"renamed {member!r} to {spelled!r}")
            member = spelled
        out[member] = value
    return out


def _values(raw: dict, controller: Any, where: str, done: Conversion) -> dict:
    spelling = {member.upper(): member for member in FIELD_MEMBERS}
    values = {}
    for name, spec in raw.items():
        here = f"{where}, field {name}"
        if name == EVERY_FIELD:
            done.note(here, 'removed the wildcard entry (in REQUEST and RESPONSE, "*" means every field)')
            continue
        if not isinstance(spec, dict):
            values[name] = spec
            continue
        entry = {}
        for member, value in spec.items():
            spelled = spelling.get(member.upper(), member)
            if spelled != member and spelled not in spec:
                done.note(here, f"renamed {member!r} to {spelled!r}")
                member = spelled
            entry[member] = value
        values[name] = _key(entry, controller, here, done)
    return values


def _key(entry: dict, controller: Any, where: str, done: Conversion) -> dict:
    """The key forms: a one-item list, lower case, the Grails names, a key written as the type,
    an FKEY's reference left out (the file's own controller) or `"self"`, and an INDEX with a
    reference (the original read it as a foreign key)."""
    key = entry.get("key")
    if isinstance(key, list) and len(key) == 1:
        key = key[0]
    if isinstance(key, str):
        key = KEY_NAMES.get(key.upper(), key.upper())
    kind = entry.get("type")
    if key is None and isinstance(kind, str) and kind.upper() in KEY_TYPES:
        key = kind.upper()
        entry["type"] = "Long"
        done.note(where, f"type {kind!r} is key {key!r} of type 'Long'")
    if key == "INDEX" and entry.get("reference") is not None:
        key = "FKEY"
        done.note(where, "key 'INDEX' with a reference is key 'FKEY' (the original framework read it so)")
    if key != entry.get("key"):
        if "key" in entry:
            done.note(where, f"key {entry['key']!r} is {key!r}")
        entry["key"] = key
    if key == "FKEY" and entry.get("reference") in (None, SELF) and isinstance(controller, str):
        done.note(where, f"reference {entry.get('reference')!r} is {controller!r} (the file's own controller)")
        entry["reference"] = controller
    return entry


def _version(raw: dict, group_roles: frozenset[str] | None, where: str, done: Conversion) -> dict:
    block = _upper_members(raw, where, done)
    uri = block.get("URI")
    if not isinstance(uri, dict):
        return block
    if "DEFAULTACTION" not in block and ORIGINAL_ACTION in uri:
        block["DEFAULTACTION"] = ORIGINAL_ACTION
        done.note(where, f"added DEFAULTACTION {ORIGINAL_ACTION!r} (the original framework's default)")
    block["URI"] = {
        action: _action(entry, group_roles, f"{where}, action {action}", done) if isinstance(entry, dict) else entry
        for action, entry in uri.items()
    }
    return block


def _action(raw: dict, group_roles: frozenset[str] | None, where: str, done: Conversion) -> dict:
    entry = _upper_members(raw, where, done)
    roles = entry.get("ROLES")
    if isinstance(roles, dict):
        roles = entry["ROLES"] = _upper_members(roles, f"{where}, ROLES", done)
        for member, names in list(roles.items()):
            roles[member] = _list(names, f"{where}, ROLES.{member}", done)
        if roles.get("DEFAULT") == []:
            del roles["DEFAULT"]
            done.note(
                where, "removed the empty ROLES.DEFAULT (the original framework then admits the network group's roles)"
            )
    default = roles.get("DEFAULT") if isinstance(roles, dict) else None
    callers = (
        frozenset(default) if isinstance(default, list) and all(isinstance(r, str) for r in default) else group_roles
    )
    for member in ("REQUEST", "RESPONSE", "RATELIMIT"):
        if isinstance(entry.get(member), dict):
            entry[member] = _by_role(entry[member], member, callers, f"{where}, {member}", done)
    return entry


def _by_role(raw: dict, member: str, callers: frozenset[str] | None, where: str, done: Conversion) -> dict:
    """REQUEST, RESPONSE or RATELIMIT with `permitAll` spelled as apid does, the field lists as
    lists, and no entry for a role that may not call the action: the original framework did not
    check them, and such a role has nothing to send, see or count there."""
    out = {}
    for role, value in raw.items():
        if member != "RATELIMIT":
            if role.lower() == PERMIT_ALL.lower() and role != PERMIT_ALL and PERMIT_ALL not in raw:
                done.note(where, f"renamed {role!r} to {PERMIT_ALL!r}")
                role = PERMIT_ALL
            value = _list(value, f"{where} {role}", done)
        if role != PERMIT_ALL and callers is not None and role not in callers:
            done.note(where, f"removed role {role!r}: it may not call this action")
            continue
        out[role] = value
    return out


def _list(value: Any, where: str, done: Conversion) -> Any:
    """A role or field list: the original framework's `""` is `[]`, and `"a, b"` is `["a", "b"]`."""
    if not isinstance(value, str):
        return value
    items = [item.strip() for item in value.split(",") if item.strip()]
    done.note(where, f"the text {value!r} is the list {items!r}")
    return items
