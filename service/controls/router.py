"""Compiler controls (docs/acf.md): the operator's CompileIQ search-space catalog, Booster
Packs, and the Advanced Controls Files the service holds. Every token reads them; the
operator (a superuser token) imports packs."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Body, Path, Query, Response
from pydantic import BaseModel
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.api.deps import PrincipalDep, ReadSession, StateDep, WriteSession
from service.api.schemas import ERROR_RESPONSES, Utc
from service.controls import packs
from service.errors import Forbidden, NotFound
from service.store.models import ControlsFile, ControlsPack, ControlsPackFile, Study

router = APIRouter(prefix="/v1/controls", tags=["compiler controls"], responses=ERROR_RESPONSES)
Sha256 = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$", description="the file's sha256")]


class SearchSpaceOut(BaseModel):
    compiler: str
    version: str
    variant: str
    sha256: str
    size_bytes: int
    description: str
    usable: bool
    problem: str | None = None


class CatalogOut(BaseModel):
    configured: bool
    problem: str | None = None  # why the catalog cannot be read at all
    entries: list[SearchSpaceOut]


class PackFileOut(BaseModel):
    filename: str
    sha256: str
    size_bytes: int


class PackOut(BaseModel):
    pack_id: str
    display_name: str
    compiler: str
    version: str
    zip_sha256: str
    imported_by: str
    created_at: Utc
    files: list[PackFileOut]
    manifest: dict[str, object]


class FileOut(BaseModel):
    sha256: str
    compiler: str
    version: str
    origin: str  # engine | pack
    size_bytes: int
    study_id: int | None
    created_at: datetime
    packs: list[str]
    content_base64: str | None = None


@router.get("/catalog", response_model=CatalogOut)
def get_catalog(state: StateDep, principal: PrincipalDep) -> CatalogOut:
    """The search spaces of the operator's catalog (PARETUNE_CONTROLS_CATALOG), each with
    its sha256 and whether its file is there intact. The service never downloads one."""
    principal.require("viewer")
    catalog = state.catalog
    entries = [SearchSpaceOut(**e.describe()) for e in catalog.entries()]
    return CatalogOut(configured=catalog.directory is not None, problem=catalog.problem, entries=entries)


@router.get("/packs", response_model=list[PackOut])
def list_packs(principal: PrincipalDep, session: ReadSession) -> list[PackOut]:
    principal.require("viewer")
    return [_pack_out(session, row) for row in session.execute(select(ControlsPack).order_by(ControlsPack.pack_id))
            .scalars()]


@router.post("/packs", response_model=PackOut, status_code=201,
             responses={200: {"description": "the same pack was imported before"}})
def import_pack(
    principal: PrincipalDep, session: WriteSession, response: Response,
    body: Annotated[bytes, Body(media_type="application/zip", description="the Booster Pack zip")],
    sha256: Annotated[str | None, Query(pattern=r"^[0-9a-f]{64}$",
                                        description="the zip's sha256 from the release's SHA256SUMS.txt")] = None,
) -> PackOut:
    """Import a Booster Pack (operator only): every file checked against the manifest (and
    SHA256SUMS.txt) before anything is stored; a 422 lists every problem."""
    if not principal.superuser:
        raise Forbidden("only the operator's admin token imports Booster Packs")
    pack = packs.parse(body, sha256)
    row, new = packs.store(session, pack, principal.name)
    if not new:
        response.status_code = 200
    return _pack_out(session, row)


@router.get("/files/{sha}", response_model=FileOut)
def get_file(sha: Sha256, principal: PrincipalDep, session: ReadSession,
             content: Annotated[bool, Query(description="include the file's bytes (base64)")] = False) -> FileOut:
    principal.require("viewer")
    row = session.get(ControlsFile, sha)
    names = list(session.execute(select(ControlsPackFile.pack_id).where(ControlsPackFile.sha256 == sha)).scalars())
    # a pack's files are every team's; an ACF the engine generated, its study's team's
    mine = row is not None and (names or row.study_id is None or _team_of(session, row.study_id) == principal.team_id)
    if row is None or not mine:
        raise NotFound(f"no controls file {sha[:12]}… is held here for your team", field="sha")
    return FileOut(sha256=row.sha256, compiler=row.compiler, version=row.version, origin=row.origin,
                   size_bytes=row.size_bytes, study_id=row.study_id, created_at=row.created_at, packs=sorted(names),
                   content_base64=base64.b64encode(row.content).decode("ascii") if content else None)


def _team_of(session: Session, study_id: int) -> int | None:
    return session.execute(select(Study.team_id).where(Study.id == study_id)).scalar_one_or_none()


def _pack_out(session: Session, row: ControlsPack) -> PackOut:
    files = session.execute(
        select(ControlsPackFile.filename, ControlsPackFile.sha256, func.length(ControlsFile.content))
        .join(ControlsFile, ControlsFile.sha256 == ControlsPackFile.sha256)
        .where(ControlsPackFile.pack_id == row.pack_id).order_by(ControlsPackFile.position)
    ).all()
    return PackOut(pack_id=row.pack_id, display_name=row.display_name, compiler=row.compiler, version=row.version,
                   zip_sha256=row.zip_sha256, imported_by=row.imported_by_name, created_at=row.created_at,
                   files=[PackFileOut(filename=f, sha256=s, size_bytes=int(n)) for f, s, n in files],
                   manifest=row.manifest)
