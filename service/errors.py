"""One error base class carrying an HTTP status; the app has one handler for it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class ApiError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, field: str | None = None, headers: dict[str, str] | None = None,
                 **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.headers = headers or {}
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "field": self.field, **self.extra}}


class Invalid(ApiError):
    status = 422
    code = "invalid"


class Unauthorized(ApiError):
    status = 401
    code = "unauthorized"


class Forbidden(ApiError):
    status = 403
    code = "forbidden"


class NotFound(ApiError):
    status = 404
    code = "not_found"


class Conflict(ApiError):
    status = 409
    code = "conflict"


class TooLarge(ApiError):
    status = 413
    code = "too_large"


class TooManyRequests(ApiError):
    status = 429
    code = "too_many_requests"


def field_errors(errors: Sequence[Any], skip: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """pydantic's error list as {field, message}: the dotted path to the field (leaving out the
    `skip` parts, such as FastAPI's "body") and what is wrong with it."""
    return [{"field": ".".join(str(p) for p in e["loc"] if p not in skip),
             "message": str(e["msg"]).removeprefix("Value error, ")} for e in errors]


def invalid(errors: list[dict[str, str]]) -> Invalid:
    """One 422 for every error found: each in `errors`, the first named in `field`."""
    summary = "; ".join(f"{e['field'] or 'body'}: {e['message']}" for e in errors[:5])
    if len(errors) > 5:
        summary += f"; and {len(errors) - 5} more"
    return Invalid(summary, field=errors[0]["field"] if errors else None, errors=errors)
