"""HTTP edges shared by every route: the body limit, the nesting limit and the one error
shape, `{"error": {"code", "message", "field", ...}}`, for every 4xx and 5xx."""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import ApiError, Invalid, TooLarge, field_errors, invalid

log = logging.getLogger("paretune.http")
MAX_JSON_DEPTH = 64
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")
_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
          409: "conflict", 413: "too_large", 415: "unsupported_media_type", 422: "invalid", 429: "too_many_requests",
          503: "unavailable"}


def json_depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text (strings skipped)."""
    if body.count(b"[") + body.count(b"{") <= MAX_JSON_DEPTH:
        return 0
    depth = deepest = 0
    for match in _BRACKETS.finditer(_STRINGS.sub(b'""', body)):
        if match.group() in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


class BodyLimit:
    """Reads request bodies up to the limit before the app sees them: a larger body (sent
    with a Content-Length or in chunks) is a 413, a JSON body nested deeper than
    MAX_JSON_DEPTH a 422, both in the error shape."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await _refuse(TooLarge(f"the request body is over {self.max_bytes} bytes; send a smaller document",
                                   field="body"), scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await _refuse(TooLarge(f"the request body is over {self.max_bytes} bytes; send a smaller document",
                                       field="body"), scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        if json_depth(body) > MAX_JSON_DEPTH:
            await _refuse(Invalid(f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels", field="body"),
                          scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _refuse(error: ApiError, scope: Scope, receive: Receive, send: Send) -> None:
    await JSONResponse(error.body(), status_code=error.status)(scope, receive, send)


def _error(status: int, message: str, field: str | None = None, **extra: Any) -> JSONResponse:
    code = _CODES.get(status, "error")
    return JSONResponse({"error": {"code": code, "message": message, "field": field, **extra}}, status_code=status)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        error = invalid(field_errors(exc.errors(), skip=("body",)))
        return JSONResponse(error.body(), status_code=error.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(OperationalError)
    @app.exception_handler(PoolTimeout)
    async def database_unavailable(request: Request, exc: Exception) -> JSONResponse:
        # no connection to be had (the database restarting, its connection limit reached), or a
        # transaction it broke off (a serialization failure): sending the request again is the fix
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path,
                    str(exc).splitlines()[0])
        response = _error(503, "the database is unavailable for the moment; retry shortly")
        response.headers["Retry-After"] = "1"
        return response

    @app.exception_handler(DataError)
    async def data_error(request: Request, exc: DataError) -> JSONResponse:
        # a value the database cannot store (out of range, a NUL character): the input's fault
        log.warning("refused a value the database cannot store on %s %s: %s", request.method, request.url.path,
                    exc.orig)
        return _error(422, "a value in the request cannot be stored (out of range, or a NUL character); "
                           "check numbers and text in the request")
