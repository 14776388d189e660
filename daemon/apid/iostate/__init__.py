"""IO State: per-controller rules deciding who may call each endpoint and which fields they see."""

from apid.iostate.loader import IOStateError, check_actions, parse, parse_text, read_dir
from apid.iostate.model import ApiVersion, ControllerState, Endpoint, FieldSpec, RoleFields, RuleSet

__all__ = [
    "ApiVersion", "ControllerState", "Endpoint", "FieldSpec", "IOStateError", "RoleFields",
    "RuleSet", "check_actions", "parse", "parse_text", "read_dir",
]
