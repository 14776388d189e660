"""The `components` every document holds: the bearer scheme, the problem answers and the
headers operations refer to, the schemas of problems and of batch and chain bodies, and the
link relations parameter."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from apid.openapi.parts import PROBLEM_RESPONSES, SECURITY_SCHEME, ref


def shared_components(links: Iterable[str] = ()) -> dict[str, Any]:
    """The shared parts; `links` are the "controller/action" names a chain's order may hold
    (those the roles may call), or none for a pattern of such names."""
    field_error = {
        "type": "object",
        "required": ["field", "reason"],
        "properties": {
            "field": {
                "type": "string",
                "description": "The field's name, or a dotted path into the body (batch.2.username)",
            },
            "reason": {"type": "string", "description": "What is wrong with it, a phrase following the name"},
        },
    }
    problem = {
        "type": "object",
        "description": "An RFC 9457 problem: every error apid answers",
        "required": ["type", "title", "status", "detail"],
        "properties": {
            "type": {"type": "string", "format": "uri", "examples": ["urn:apid:problem:invalid-fields"]},
            "title": {"type": "string", "description": "The status's reason phrase"},
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
            "detail": {"type": "string"},
            "instance": {"type": "string", "description": "The request path"},
            "requestId": {"type": "string", "description": "The request's id, as in the X-Request-ID header"},
            "errors": {
                "type": "array",
                "items": ref("schemas", "FieldError"),
                "description": "Every bad field (400 invalid-fields, a malformed batch or chain body)",
            },
            "allow": {"type": "array", "items": {"type": "string"}, "description": "405: the methods allowed"},
            "servedVersion": {"type": "string", "description": "404 for another application version"},
            "limit": {"type": "integer", "description": "413: the limit passed"},
            "index": {"type": "integer", "minimum": 0, "description": "A batch element's position"},
            "rule": {"type": "string", "description": "422 chain-rule: which rule was broken"},
            "link": {
                "type": "object",
                "description": "A chain link: its position and endpoint",
                "properties": {"position": {"type": "integer"}, "endpoint": {"type": "string"}},
            },
            "nonSafeCallCompleted": {
                "type": "boolean",
                "description": "A failed chain: whether its PUT, POST or DELETE had run",
            },
        },
    }
    headers = {
        "RateLimit": (
            'The quota left: "<policy>";r=<requests left>;t=<seconds to reset>, when your '
            "roles are rate limited; a second item for an endpoint with its own limit",
            {"type": "string"},
            '"ROLE_USER";r=999;t=86400',
        ),
        "RateLimit-Policy": (
            'Your quota: "<policy>";q=<requests a day>;w=86400, when your roles are '
            'rate limited; a second item, "<controller>/<action>";q=<calls>;w=<seconds>, '
            "for an endpoint with its own limit",
            {"type": "string"},
            '"ROLE_USER";q=1000;w=86400',
        ),
        "Link": (
            "RFC 8288 links to related calls, when asked with X-LINK_RELATIONS; a paged list's "
            "next, prev and first always",
            {"type": "string"},
            '</v0.1/person/show/2>; rel="self"; method="GET"',
        ),
        "Retry-After": ("Seconds to wait before trying again", {"type": "integer", "minimum": 0}, 3600),
        "Deprecation": (
            "RFC 9745: @<Unix seconds> this API version is (or will be) deprecated from",
            {"type": "string"},
            "@1767225600",
        ),
        "Sunset": (
            "RFC 8594: when this API version goes; from then on it answers 410",
            {"type": "string"},
            "Tue, 30 Jun 2026 00:00:00 GMT",
        ),
        "WWW-Authenticate": ("The scheme to authenticate with", {"type": "string"}, 'Bearer realm="apid"'),
        "Allow": ("The methods allowed", {"type": "string"}, "GET"),
        "Set-Cookie": (
            "The refresh cookie (HttpOnly), sent back to /refreshToken and /logout",
            {"type": "string"},
            "apid_refresh=...; Path=/; HttpOnly; SameSite=strict",
        ),
        "Location": ("Where the browser is sent", {"type": "string", "format": "uri"}, "https://example.com/"),
    }
    return {
        "securitySchemes": {
            SECURITY_SCHEME: {
                "type": "http",
                "scheme": "bearer",
                "bearerFormat": "JWT",
                "description": "The access token from POST /authenticate, as Authorization: Bearer <token>",
            }
        },
        "schemas": {
            "Problem": problem,
            "FieldError": field_error,
            "BatchError": {
                "allOf": [
                    ref("schemas", "Problem"),
                    {
                        "type": "object",
                        "required": ["index"],
                        "properties": {"index": {"type": "integer", "minimum": 0}},
                    },
                ]
            },
            "Combine": {
                "description": "true: every output, in order; false, null or absent: only the last",
                "anyOf": [{"type": ["boolean", "null"]}, {"type": "string", "enum": ["true", "false"]}],
            },
            "Chain": {
                "type": "object",
                "required": ["key", "order"],
                "additionalProperties": False,
                "properties": {
                    "key": {
                        "type": "string",
                        "minLength": 1,
                        "description": "The field of the first link's output passed to the second as its id",
                    },
                    "type": {
                        "type": "string",
                        "enum": ["postchain", "prechain", "blankchain"],
                        "description": "Where the one PUT, POST or DELETE stands; absent on a GET chain: blankchain",
                    },
                    "combine": ref("schemas", "Combine"),
                    "order": {
                        "type": "object",
                        "minProperties": 1,
                        "description": 'Each further link, in order, "controller/action" -> the field of its '
                        'output passed on; the last link -> "return"',
                        "propertyNames": {"enum": sorted(links)}
                        if links
                        else {"pattern": "^[A-Za-z_][A-Za-z0-9_]*/[A-Za-z_][A-Za-z0-9_]*$"},
                        "additionalProperties": {"type": "string", "minLength": 1},
                    },
                },
            },
        },
        "responses": dict(PROBLEM_RESPONSES.values()),
        "headers": {
            name: {"description": text, "schema": schema, "example": example}
            for name, (text, schema, example) in headers.items()
        },
        "parameters": {
            "LinkRelations": {
                "name": "X-LINK_RELATIONS",
                "in": "header",
                "required": False,
                "schema": {"type": "string"},
                "description": "Any value: answer a Link header of the calls related to this one "
                "(X-LINK-RELATIONS is accepted too)",
            }
        },
    }
