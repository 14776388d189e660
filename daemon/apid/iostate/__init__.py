"""IO State: per-controller rules deciding who may call each endpoint and which fields they see."""

from apid.iostate.loader import (
    IOStateError,
    bind_audiences,
    bind_references,
    check_actions,
    check_fields,
    check_hook_roles,
    check_shared_caches,
    parse,
    parse_text,
    read_dir,
)
from apid.iostate.model import PATH_ID, ApiVersion, Audience, ControllerState, Endpoint, FieldSpec, RoleFields, RuleSet

__all__ = [
    "PATH_ID",
    "ApiVersion",
    "Audience",
    "ControllerState",
    "Endpoint",
    "FieldSpec",
    "IOStateError",
    "RoleFields",
    "RuleSet",
    "bind_audiences",
    "bind_references",
    "check_actions",
    "check_fields",
    "check_hook_roles",
    "check_shared_caches",
    "parse",
    "parse_text",
    "read_dir",
]
