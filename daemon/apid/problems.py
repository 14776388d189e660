"""RFC 9457 problem details: every error apid answers is a `Problem`, rendered in one place.

Plugins raise these too (they are re-exported by `apid.plugin`), so a controller's
"not found" looks exactly like the daemon's.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any, ClassVar, overload

PROBLEM_TYPE_BASE = "urn:apid:problem:"
MEDIA_TYPE = "application/problem+json"

FieldError = dict[str, str]
"""One entry of an `InvalidFields` problem's `errors`: `{"field": name, "reason": text}`."""

FIELD_ERROR_SCHEMA: Mapping[str, Any] = {
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
"""The JSON Schema of a `FieldError`; the API documents name it `FieldError`."""
ERRORS_MEMBER = {
    "type": "array",
    "items": {"$ref": "#/components/schemas/FieldError"},
    "description": "Every bad field",
}
FIELD_MEMBER = {"type": "string", "description": "The request field the problem is about"}


class Problem(Exception):
    """An error with an HTTP status, answered to the client as `application/problem+json`."""

    status: int = 500
    slug: str = "internal-error"
    # The JSON Schema of the extension members this type may carry, beside RFC 9457's, and
    # those it always carries: the API documents give each problem type its own schema from these.
    members: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    required_members: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        detail: str,
        *,
        title: str | None = None,
        headers: dict[str, str] | None = None,
        **extensions: Any,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.title = title or HTTPStatus(self.status).phrase
        self.headers = headers or {}
        self.extensions = extensions

    @property
    def type(self) -> str:
        return type_uri(type(self))

    def to_dict(self, instance: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": self.type,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }
        if instance is not None:
            body["instance"] = instance
        body.update(self.extensions)
        return body


class BadRequest(Problem):
    """A malformed request: a body that is not JSON, a malformed batch or chain object."""

    status, slug = 400, "bad-request"
    members: ClassVar[Mapping[str, Any]] = {"errors": ERRORS_MEMBER}


class InvalidFields(BadRequest):
    """Request fields the role may not send, or values of the wrong type; `errors` lists each,
    and the detail names them unless given."""

    slug = "invalid-fields"
    required_members = ("errors",)

    @overload
    def __init__(self, detail: str | None = None, *, errors: Sequence[FieldError]) -> None: ...

    @overload
    def __init__(self, errors: Sequence[FieldError], detail: str | None = None) -> None:
        """apid 0.1's form, deprecated: it warns (docs/compatibility.md)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "errors" not in kwargs:
            args, kwargs = _invalid_fields_of_0_1(*args, **kwargs)
        self._make(*args, **kwargs)

    def _make(self, detail: str | None = None, *, errors: Sequence[FieldError]) -> None:
        errors = list(errors)  # the body's array
        names = ", ".join(e["field"] for e in errors)
        super().__init__(detail or f"invalid request fields: {names}", errors=errors)


# What inspect, help() and the reference show: today's form (the 0.1 form is only accepted).
_TODAYS_FORM = inspect.signature(InvalidFields._make)
InvalidFields.__signature__ = _TODAYS_FORM.replace(  # type: ignore[attr-defined]
    parameters=list(_TODAYS_FORM.parameters.values())[1:]
)

_INVALID_FIELDS_0_1 = inspect.Signature(
    [
        inspect.Parameter("errors", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        inspect.Parameter("detail", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
    ]
)


def _invalid_fields_of_0_1(*args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """`InvalidFields(errors, detail=None)`, the form docs/plugins.md showed until 0.1.0, as the
    arguments of today's; it warns, naming today's form, until it is removed (not before 0.3)."""
    given = _INVALID_FIELDS_0_1.bind(*args, **kwargs)  # a TypeError as that signature would raise
    warnings.warn(
        "InvalidFields(errors, detail) is deprecated since apid 0.2 and goes in 0.3: "
        "write InvalidFields(errors=[...]), with the detail first if any: InvalidFields(detail, errors=[...])",
        DeprecationWarning,
        stacklevel=3,  # the line of the plugin: past this function and InvalidFields.__init__
    )
    return (given.arguments.get("detail"),), {"errors": given.arguments["errors"]}


class Unauthorized(Problem):
    """No, a malformed, an invalid, an expired or a revoked access token."""

    status, slug = 401, "unauthorized"

    def __init__(self, detail: str, **extensions: Any) -> None:
        super().__init__(detail, headers={"WWW-Authenticate": 'Bearer realm="apid"'}, **extensions)


class Forbidden(Problem):
    """None of the caller's roles may do this, or a wrong current password (`field`)."""

    status, slug = 403, "forbidden"
    members: ClassVar[Mapping[str, Any]] = {"field": FIELD_MEMBER}


class NotFound(Problem):
    """No such application version (`servedVersion` names the one served), controller, API
    version, action or record."""

    status, slug = 404, "not-found"
    members: ClassVar[Mapping[str, Any]] = {
        "servedVersion": {"type": "string", "description": "The application version this daemon serves"}
    }


class MethodNotAllowed(Problem):
    """A method the path does not take: `allow` (and the Allow header) lists those it does."""

    status, slug = 405, "method-not-allowed"
    members: ClassVar[Mapping[str, Any]] = {
        "allow": {"type": "array", "items": {"type": "string"}, "description": "The methods allowed"}
    }
    required_members = ("allow",)

    def __init__(self, detail: str, *, allow: list[str]) -> None:
        super().__init__(detail, headers={"Allow": ", ".join(allow)}, allow=allow)


class RequestTimeout(Problem):
    """A request that did not arrive whole within its deadline (`connections` settings)."""

    status, slug = 408, "request-timeout"


class Conflict(Problem):
    """A change that conflicts with what is stored: a name taken (`field`), or a stale
    `version` (`currentVersion` is the stored one)."""

    status, slug = 409, "conflict"
    members: ClassVar[Mapping[str, Any]] = {
        "field": FIELD_MEMBER,
        "currentVersion": {"type": "integer", "description": "A stale update: the record's stored version"},
    }


class Gone(Problem):
    """An API version past its sunset: the problem names the version to call instead."""

    status, slug = 410, "gone"
    members: ClassVar[Mapping[str, Any]] = {
        "currentApiVersion": {"type": "string", "description": "The API version to call instead"},
        "successor": {"type": "string", "description": "The same call's path in that version, when it has it"},
    }
    required_members = ("currentApiVersion",)


class PreconditionFailed(Problem):
    """An If-Match that does not hold: the record a write names (as its `show` answers the
    caller), or a GET's answer, has another ETag than the client read; or a write with If-Match
    names no record to compare."""

    status, slug = 412, "precondition-failed"


class PayloadTooLarge(Problem):
    """A body over `maxBodyBytes`, or a batch over `batchLimit` (`limit` says which limit)."""

    status, slug = 413, "payload-too-large"
    members: ClassVar[Mapping[str, Any]] = {"limit": {"type": "integer", "description": "The limit passed"}}


class UriTooLong(Problem):
    status, slug = 414, "uri-too-long"


class UnsupportedMediaType(Problem):
    status, slug = 415, "unsupported-media-type"


class Unprocessable(Problem):
    """Well-formed but refused by an action's own rule."""

    status, slug = 422, "unprocessable"


class ChainRuleBroken(Unprocessable):
    """A chain that breaks a chain rule (`rule`), found before any link runs, or a link whose
    output lacks the key to pass on (`missing-key`, with `link` and `key`)."""

    slug = "chain-rule"
    members: ClassVar[Mapping[str, Any]] = {
        "rule": {
            "type": "string",
            "enum": [
                "chain-limit",
                "unknown-link",
                "one-non-safe-method",
                "non-safe-method-required",
                "blankchain-safe-only",
                "non-safe-method-position",
                "request-method",
                "missing-key",
            ],
        },
        "key": {"type": "string", "description": "missing-key: the field the link's output lacked"},
    }
    required_members = ("rule",)


class TooManyRequests(Problem):
    """A rate limit used up: `violatedPolicies` names the RateLimit-Policy items refused."""

    status, slug = 429, "too-many-requests"
    members: ClassVar[Mapping[str, Any]] = {"violatedPolicies": {"type": "array", "items": {"type": "string"}}}


class HeadersTooLarge(Problem):
    status, slug = 431, "headers-too-large"


class InternalError(Problem):
    """The call failed; the error was logged under the request's id."""

    status, slug = 500, "internal-error"


class BadGateway(Problem):
    """An upstream service a plugin calls answered something unusable: an error, a refused or
    reset connection, a body it cannot read."""

    status, slug = 502, "bad-gateway"


class ServiceUnavailable(Problem):
    """A dependency (the database, a store, an upstream service) cannot be reached now: try
    again after Retry-After, which `retry_after` (seconds, rounded up) sets."""

    status, slug = 503, "service-unavailable"

    def __init__(
        self,
        detail: str,
        *,
        retry_after: float | None = None,
        title: str | None = None,
        headers: dict[str, str] | None = None,
        **extensions: Any,
    ) -> None:
        if retry_after is not None:
            headers = {**(headers or {}), "Retry-After": str(math.ceil(max(0.0, retry_after)))}
        super().__init__(detail, title=title, headers=headers, **extensions)


class GatewayTimeout(Problem):
    """An upstream service a plugin calls did not answer in time."""

    status, slug = 504, "gateway-timeout"


def problem_for_status(status: int, detail: str) -> Problem:
    """A problem of the kind that answers `status`; a status with no kind of its own gets a
    generic problem named after its reason phrase."""
    for kind in (
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        Gone,
        PreconditionFailed,
        PayloadTooLarge,
        UriTooLong,
        UnsupportedMediaType,
        Unprocessable,
        TooManyRequests,
        HeadersTooLarge,
        InternalError,
        BadGateway,
        ServiceUnavailable,
        GatewayTimeout,
    ):
        if kind.status == status:
            return kind(detail)
    generic = type(
        f"Status{status}",
        (Problem,),
        {
            "status": status,
            "slug": HTTPStatus(status).name.lower().replace("_", "-"),
        },
    )
    return generic(detail)


PROBLEM_TYPES: tuple[type[Problem], ...] = (
    BadRequest,
    InvalidFields,
    Unauthorized,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    RequestTimeout,
    Conflict,
    Gone,
    PreconditionFailed,
    PayloadTooLarge,
    UriTooLong,
    UnsupportedMediaType,
    Unprocessable,
    ChainRuleBroken,
    TooManyRequests,
    HeadersTooLarge,
    InternalError,
    BadGateway,
    ServiceUnavailable,
    GatewayTimeout,
)
"""Every problem type apid itself answers, each with its own schema in the API documents and
its own section on the problem types page (`apid.openapi.docs_page`)."""

TYPES_PAGE = "/docs/assets/problems.html"
"""The daemon's page of every problem type, one section each (`#` and the type's slug): what a
`type` leads a reader to. The `type` values stay URNs, the same in every deployment."""


def type_page(kind: type[Problem]) -> str:
    return f"{TYPES_PAGE}#{kind.slug}"


def type_uri(kind: type[Problem]) -> str:
    """The `type` every problem of this kind is answered with."""
    return PROBLEM_TYPE_BASE + kind.slug
