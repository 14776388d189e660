"""RFC 9457 problem details: every error apid answers is a `Problem`, rendered in one place.

Plugins raise these too (they are re-exported by `apid.plugin`), so a controller's
"not found" looks exactly like the daemon's.
"""

from __future__ import annotations

from collections.abc import Sequence
from http import HTTPStatus
from typing import Any

PROBLEM_TYPE_BASE = "urn:apid:problem:"
MEDIA_TYPE = "application/problem+json"

FieldError = dict[str, str]
"""One entry of an `InvalidFields` problem's `errors`: `{"field": name, "reason": text}`."""


class Problem(Exception):
    """An error with an HTTP status, answered to the client as `application/problem+json`."""

    status: int = 500
    slug: str = "internal-error"

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
        return PROBLEM_TYPE_BASE + self.slug

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
    status, slug = 400, "bad-request"


class InvalidFields(BadRequest):
    """Request fields the role may not send, or values of the wrong type; `errors` lists each,
    and the detail names them unless given."""

    slug = "invalid-fields"

    def __init__(self, detail: str | None = None, *, errors: Sequence[FieldError]) -> None:
        errors = list(errors)  # the body's array
        names = ", ".join(e["field"] for e in errors)
        super().__init__(detail or f"invalid request fields: {names}", errors=errors)


class Unauthorized(Problem):
    status, slug = 401, "unauthorized"

    def __init__(self, detail: str, **extensions: Any) -> None:
        super().__init__(detail, headers={"WWW-Authenticate": 'Bearer realm="apid"'}, **extensions)


class Forbidden(Problem):
    status, slug = 403, "forbidden"


class NotFound(Problem):
    status, slug = 404, "not-found"


class MethodNotAllowed(Problem):
    status, slug = 405, "method-not-allowed"

    def __init__(self, detail: str, *, allow: list[str]) -> None:
        super().__init__(detail, headers={"Allow": ", ".join(allow)}, allow=allow)


class RequestTimeout(Problem):
    """A request that did not arrive whole within its deadline (`connections` settings)."""

    status, slug = 408, "request-timeout"


class Conflict(Problem):
    status, slug = 409, "conflict"


class Gone(Problem):
    """An API version past its sunset: the problem names the version to call instead."""

    status, slug = 410, "gone"


class PayloadTooLarge(Problem):
    status, slug = 413, "payload-too-large"


class UriTooLong(Problem):
    status, slug = 414, "uri-too-long"


class UnsupportedMediaType(Problem):
    status, slug = 415, "unsupported-media-type"


class Unprocessable(Problem):
    status, slug = 422, "unprocessable"


class TooManyRequests(Problem):
    status, slug = 429, "too-many-requests"


class HeadersTooLarge(Problem):
    status, slug = 431, "headers-too-large"


class InternalError(Problem):
    status, slug = 500, "internal-error"


class ServiceUnavailable(Problem):
    status, slug = 503, "service-unavailable"


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
        PayloadTooLarge,
        UriTooLong,
        UnsupportedMediaType,
        Unprocessable,
        TooManyRequests,
        HeadersTooLarge,
        InternalError,
        ServiceUnavailable,
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
