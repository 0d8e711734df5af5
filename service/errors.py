"""One error base class carrying an HTTP status; the app has one handler for it."""

from __future__ import annotations

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


def invalid_from_pydantic(exc: Any) -> Invalid:
    """A 422 from a pydantic ValidationError: every error with its field, the first named."""
    errors = [
        {"field": ".".join(str(p) for p in e["loc"]), "message": str(e["msg"]).removeprefix("Value error, ")}
        for e in exc.errors()
    ]
    first = errors[0] if errors else {"field": None}
    summary = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
    return Invalid(summary, field=first["field"], errors=errors)
