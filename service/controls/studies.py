"""A study's compiler controls parameters made concrete when it is created, or a 422 naming
the field and the fix:
- an engine parameter (CompileIQ generates its files) needs the catalog's search space of
  its compiler, version and variant; the study keeps that space's sha256, so that it never
  carries on with another;
- a pack parameter's choices become "none" and the pack's files, in the manifest's order;
- given choices must be files the service holds, for the parameter's compiler and release;
- some worker of the study's pool must compile with that release (an ACF applies only with
  the compiler release it was generated for), and the pool's own toolchain requirement, if
  it has one, must be of it.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.controls.catalog import CatalogError, ControlsCatalog
from service.errors import Invalid
from service.store.models import ControlsFile, ControlsPack, ControlsPackFile, Pool, Worker
from service.studies.document import DocumentError, ResolvedDocument, check_grid
from service.studies.space import SearchSpace
from wire.contract import NO_CONTROLS
from wire.space import CompilerControlsParam
from wire.targets import release_of


def resolve(session: Session, catalog: ControlsCatalog, document: ResolvedDocument) -> None:
    """Fill in the document's controls parameters (in place), or raise Invalid."""
    for index, param in enumerate(document.space):
        if isinstance(param, CompilerControlsParam):
            document.space[index] = _resolved(session, catalog, document, param, f"space.{index}")
    packs = any(isinstance(p, CompilerControlsParam) and p.pack for p in document.space)
    if document.sampler.name == "grid" and packs:
        try:  # the grid, now that the packs' files are its choices
            size = check_grid(SearchSpace(document.space))
        except DocumentError as exc:
            raise Invalid(exc.message, field=exc.field) from None
        document.budget.max_trials = min(document.budget.max_trials, size + 1)


def _resolved(session: Session, catalog: ControlsCatalog, document: ResolvedDocument, param: CompilerControlsParam,
              field: str) -> CompilerControlsParam:
    # as given, with compiler, variant and default stored explicitly
    filled = {key: getattr(param, key) for key in ("compiler", "variant", "default")}
    if param.pack:
        choices = _pack_files(session, param, field)
        if param.default not in choices:
            raise Invalid(f"the default {param.default!r} is not a file of pack {param.pack!r}",
                          field=f"{field}.default")
        filled["choices"] = choices
    elif param.choices is not None:
        _known_files(session, param, field)
    else:
        try:
            entry = catalog.find(param.compiler, param.version, param.variant)
        except CatalogError as exc:
            raise Invalid(f"{exc}; the operator provides the catalog (PARETUNE_CONTROLS_CATALOG, docs/acf.md)",
                          field=f"{field}.version") from None
        filled["search_space_sha256"] = entry.sha256
    _pool_compiles(session, document.pool, document.kernel.backend, param, field)
    return param.model_copy(update=filled)


def _pack_files(session: Session, param: CompilerControlsParam, field: str) -> list[str]:
    pack = session.get(ControlsPack, param.pack)
    if pack is None:
        known = sorted(session.execute(select(ControlsPack.pack_id)).scalars())
        raise Invalid(f"no Booster Pack {param.pack!r} has been imported (imported: {', '.join(known) or 'none'}); "
                      "an operator imports one with `paretune acf import-pack`", field=f"{field}.pack")
    if (pack.compiler, pack.version) != (param.compiler, param.version):
        raise Invalid(f"pack {pack.pack_id!r} holds {pack.compiler} {pack.version} files, not {param.compiler} "
                      f"{param.version}: set {field}.version to {pack.version}", field=f"{field}.version")
    files = session.execute(select(ControlsPackFile.sha256).where(ControlsPackFile.pack_id == pack.pack_id)
                            .order_by(ControlsPackFile.position)).scalars()
    return [NO_CONTROLS, *dict.fromkeys(files)]


def _known_files(session: Session, param: CompilerControlsParam, field: str) -> None:
    choices = param.choices or []
    wanted = [c for c in choices if c != NO_CONTROLS]
    rows = {sha: (compiler, version) for sha, compiler, version in session.execute(
        select(ControlsFile.sha256, ControlsFile.compiler, ControlsFile.version)
        .where(ControlsFile.sha256.in_(wanted)))}
    for position, sha in enumerate(choices):
        if sha == NO_CONTROLS:
            continue
        if sha not in rows:
            raise Invalid(f"no controls file {sha[:12]}… is held here: name files of an imported pack or of an "
                          "earlier study", field=f"{field}.choices.{position}")
        if rows[sha] != (param.compiler, param.version):
            raise Invalid(f"the file {sha[:12]}… is for {rows[sha][0]} {rows[sha][1]}, not {param.compiler} "
                          f"{param.version}", field=f"{field}.choices.{position}")


def _pool_compiles(session: Session, pool: str, backend: str, param: CompilerControlsParam, field: str) -> None:
    version = param.version
    rule = session.execute(select(Pool.toolchain).where(Pool.name == pool)).scalar_one_or_none()
    if rule and release_of(rule.removeprefix("nvidia-cuda-nvcc==")) != version:
        raise Invalid(f"pool {pool!r} requires the toolchain {rule}, whose ptxas refuses {param.compiler} "
                      f"{version} controls files: run the study in a pool of {version} workers",
                      field=f"{field}.version")
    releases: dict[str, int] = {}
    for fingerprint, backends in session.execute(select(Worker.fingerprint, Worker.backends)
                                                 .where(Worker.pool == pool)):
        if backend not in (backends or []):
            continue
        release = ((fingerprint or {}).get("toolchain") or {}).get("release") or "none"
        releases[release] = releases.get(release, 0) + 1
        if release == version:
            return
    seen = ", ".join(f"{r} on {n}" for r, n in sorted(releases.items())) or f"no {backend} worker has registered"
    raise Invalid(f"no worker of pool {pool!r} compiles with {param.compiler} {version}, which these controls "
                  f"files need (its {backend} workers' toolchains: {seen}); start one with `paretune worker --pool "
                  f"{pool} --toolchain {version}` (after `paretune toolchain install nvidia-cuda-nvcc=={version}.X`)",
                  field=f"{field}.version")
