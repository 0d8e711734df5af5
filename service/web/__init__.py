"""The dashboard: static pages served by the control plane itself, working offline."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles


def mount_dashboard(app: FastAPI, static_dir: Path) -> None:
    index = static_dir / "index.html"

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/ui/")

    @app.get("/ui/", include_in_schema=False)
    async def dashboard() -> FileResponse:
        return FileResponse(index)

    app.mount("/static", StaticFiles(directory=static_dir, check_dir=False), name="static")
