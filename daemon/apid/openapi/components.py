"""The `components` every document holds: the bearer scheme, the problem answers and the
headers operations refer to, the schemas of problems and of batch and chain bodies, the 304 of
a revalidated GET, and the request headers every call takes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from apid.http.operations import NOT_MODIFIED, PROBLEM_RESPONSES, SECURITY_SCHEME, header_refs
from apid.http.problem_schemas import problem_schemas
from apid.openapi.chains import chain_schemas


def shared_components(links: Iterable[str] = ()) -> dict[str, Any]:
    """The shared parts; `links` are the "controller/action" names a chain's order may hold
    (those the roles may call), or none for a pattern of such names."""
    headers = {
        "RateLimit": (
            'The quota left, `"POLICY";r=LEFT;t=SECONDS` (the requests left and the seconds until the '
            "count starts again), when your roles are rate limited; a second item for an endpoint with its own limit",
            {"type": "string"},
            '"ROLE_USER";r=999;t=86400',
        ),
        "RateLimit-Policy": (
            'Your quota, `"POLICY";q=REQUESTS;w=86400` (requests a day), when your roles are '
            'rate limited; a second item, `"CONTROLLER/ACTION";q=CALLS;w=SECONDS`, '
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
            "RFC 9745: `@SECONDS`, the Unix time this API version is (or will be) deprecated from",
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
        "ETag": (
            "The answer's entity tag: send it back as If-None-Match to get 304 while the answer is unchanged",
            {"type": "string"},
            '"3f2a9c0d1e5b7a4c8d6e0f1a2b3c4d5e"',
        ),
        "Next-Offset": (
            "The `offset` of the next page, when this one was full (there may be more); absent after the last "
            "page: the `next` link's offset, for clients that page without parsing Link",
            {"type": "integer", "minimum": 0},
            40,
        ),
        "Idempotent-Replayed": (
            "true: this is the answer kept for the Idempotency-Key sent, to its first request, replayed",
            {"type": "string", "enum": ["true"]},
            "true",
        ),
        "X-Request-ID": (
            "The request's id: the one sent (1 to 128 visible ASCII characters) or one made for it; "
            "problems and the daemon's log carry it too",
            {"type": "string"},
            "4bf92f3577b34da6a3ce929d0e0e4736",
        ),
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
            **problem_schemas(),
            **chain_schemas(links),
            "Combine": {
                "description": "true: every output, in order; false, null or absent: only the last",
                "anyOf": [{"type": ["boolean", "null"]}, {"type": "string", "enum": ["true", "false"]}],
            },
        },
        "responses": {
            **dict(PROBLEM_RESPONSES.values()),
            NOT_MODIFIED: {
                "description": "Not modified: If-None-Match names the answer's current ETag; no body",
                "headers": header_refs("ETag", "X-Request-ID"),
            },
        },
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
            },
            "RequestId": {
                "name": "X-Request-ID",
                "in": "header",
                "required": False,
                # any value is accepted: one that is not an id is replaced, never refused
                "schema": {"type": "string"},
                "description": "Your id for the request, answered back and logged when it is 1 to 128 visible "
                "ASCII characters; otherwise (or without it) the daemon makes one",
            },
            "IfMatch": {
                "name": "If-Match",
                "in": "header",
                "required": False,
                "schema": {"type": "string"},
                "description": "The ETag of the record as you last read it (its show's answer), or `*`: the "
                "change is made only to that record as it was, else 412 and nothing changes. The record's "
                "version is then checked in the same step as the change",
            },
            "IdempotencyKey": {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"},
                "description": "Your key for this request (a UUID, say): a retry with the same key gets the first "
                "answer again, replayed, rather than running twice; kept 24 hours per account. The same key "
                "with another request is a 422, and one while the first still runs a 409",
            },
            "IfNoneMatch": {
                "name": "If-None-Match",
                "in": "header",
                "required": False,
                "schema": {"type": "string"},
                "description": "ETags of answers you hold: 304 without a body when the answer's is among them",
            },
        },
    }
