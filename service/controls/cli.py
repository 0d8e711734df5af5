"""`paretune acf catalog|packs|import-pack|pull`: compiler controls over HTTP (docs/acf.md).

Works on a worker-only install: httpx and the artifact CLI's error formatting only.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from service.artifacts.cli import error_message
from service.cli_options import DEFAULT_SERVER, ServerOpt, TokenOpt

acf_app = typer.Typer(help="Compiler controls: the search-space catalog, Booster Packs, ACF files.",
                      no_args_is_help=True)


def _call(method: str, server: str, path: str, token: str, headers: dict[str, str] | None = None,
          **kwargs: Any) -> Any:
    if not token:
        _fail("no token: pass --token or set PARETUNE_TOKEN")
    try:
        response = httpx.request(method, server.rstrip("/") + path,
                                 headers={"Authorization": f"Bearer {token}", **(headers or {})}, timeout=120, **kwargs)
    except httpx.HTTPError as exc:
        _fail(f"cannot reach {server}: {exc}")
    if response.status_code >= 400:
        _fail(error_message(response))
    return response.json()


def _fail(message: str, code: int = 1) -> Any:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@acf_app.command("catalog")
def catalog(server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = "") -> None:
    """The operator's CompileIQ search spaces and whether each is usable."""
    body = _call("GET", server, "/v1/controls/catalog", token)
    if not body["configured"] or body.get("problem"):
        typer.echo(f"catalog: {body.get('problem') or 'not configured'}")
    for entry in body["entries"]:
        state = "ok" if entry["usable"] else f"UNUSABLE: {entry['problem']}"
        typer.echo(f"{entry['compiler']} {entry['version']} ({entry['variant']})\t{entry['sha256'][:16]}\t{state}")


@acf_app.command("packs")
def list_packs(server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = "") -> None:
    """The imported Booster Packs."""
    for pack in _call("GET", server, "/v1/controls/packs", token):
        typer.echo(f"{pack['pack_id']}\t{pack['compiler']} {pack['version']}\t{len(pack['files'])} ACFs\t"
                   f"{pack['display_name']}")


def release_sum(sums: Path, name: str) -> str:
    """The sha256 SHA256SUMS.txt gives for the file `name`."""
    for line in sums.read_text().splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1].lstrip("*") == name:
            return fields[0]
    return _fail(f"{sums} lists no {name}: pass the release's SHA256SUMS.txt that lists this zip")  # type: ignore[no-any-return]


@acf_app.command("import-pack")
def import_pack(
    file: Annotated[Path, typer.Argument(help="the Booster Pack zip")],
    sums: Annotated[Path | None, typer.Option(help="the release's SHA256SUMS.txt: the zip must match it")] = None,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = "",
) -> None:
    """Import a Booster Pack (operator token): its ACFs become a choice studies can search."""
    data = file.read_bytes()
    params = {"sha256": release_sum(sums, file.name)} if sums is not None else {}
    if params and params["sha256"] != hashlib.sha256(data).hexdigest():
        _fail(f"{file} does not match {sums}: its sha256 is {hashlib.sha256(data).hexdigest()}")
    pack = _call("POST", server, "/v1/controls/packs", token, content=data, params=params,
                 headers={"Content-Type": "application/zip"})
    parameter = f"{{type: compiler_controls, version: \"{pack['version']}\", pack: {pack['pack_id']}}}"
    typer.echo(f"imported {pack['pack_id']}: {len(pack['files'])} {pack['compiler']} {pack['version']} ACFs; "
               f"a study searches them with {parameter}")


@acf_app.command("pull")
def pull(
    sha256: Annotated[str, typer.Argument(help="the ACF's sha256 (as a trial's configuration names it)")],
    output: Annotated[Path, typer.Option("-o", "--output", help="where to write the ACF")],
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = "",
) -> None:
    """Write an ACF the service holds to a file (for ptxas --apply-controls)."""
    body = _call("GET", server, f"/v1/controls/files/{sha256}", token, params={"content": "true"})
    content = base64.b64decode(body["content_base64"])
    if hashlib.sha256(content).hexdigest() != sha256:
        _fail("the file the service sent does not match its sha256")
    output.write_bytes(content)
    typer.echo(json.dumps({k: v for k, v in body.items() if k != "content_base64"}))
