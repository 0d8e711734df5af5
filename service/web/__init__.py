"""The dashboard: static pages served by the control plane itself, working offline.

Plain ES modules, CSS and hand-drawn charts; nothing is built or fetched from elsewhere.
Every path under /ui/ returns the same page, whose router renders the view for the path,
so links to a study or a trial can be shared and reloaded.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import Scope

# Revalidate on every load (a cheap 304): after an upgrade nobody runs yesterday's modules.
NO_CACHE = {"Cache-Control": "no-cache"}


class RevalidatedStaticFiles(StaticFiles):
    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(NO_CACHE)
        return response


def mount_dashboard(app: FastAPI, static_dir: Path) -> None:
    index = static_dir / "index.html"

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/ui/")

    @app.get("/ui", include_in_schema=False)
    async def ui_no_slash() -> RedirectResponse:
        return RedirectResponse("/ui/")

    @app.get("/ui/", include_in_schema=False)
    @app.get("/ui/{path:path}", include_in_schema=False)
    async def dashboard(path: str = "") -> FileResponse:
        return FileResponse(index, headers=NO_CACHE)

    app.mount("/static", RevalidatedStaticFiles(directory=static_dir, check_dir=False), name="static")
