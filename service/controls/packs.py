"""Booster Packs: zips of curated Advanced Controls Files, in CompileIQ's documented layout
(docs/booster_packs.md of NVIDIA/CompileIQ): a folder holding `booster-pack-manifest.json`
and the `.acf` files it lists (filename, sha256, size_bytes), and here also the release's
`SHA256SUMS.txt` lines ("<sha256>  <name>") when the operator has them.

An import checks everything before it stores anything, and names every problem at once: the
zip itself against the release's checksum when given, the manifest's fields, each file's
size and sha256 against the manifest and against SHA256SUMS.txt, no file the manifest does
not list. The files become controls files (controls_files); the pack, a choice a study's
compiler_controls parameter can name (`pack: <pack_id>`), with "none" as the baseline.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.errors import Conflict, Invalid
from service.store.models import ControlsFile, ControlsPack, ControlsPackFile

MANIFEST = "booster-pack-manifest.json"
SUMS = "SHA256SUMS.txt"
MAX_ZIP_BYTES = 64 << 20
MAX_FILES = 4096
MAX_ACF_BYTES = 1 << 20
_SHA = re.compile(r"^[0-9a-f]{64}$")
_PACK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_RELEASE = re.compile(r"^(\d+)\.(\d+)")
STAGES = {"ptxas": "ptxas", "nvcc": "nvcc"}


@dataclass
class PackFile:
    filename: str
    sha256: str
    content: bytes


@dataclass
class Pack:
    pack_id: str
    display_name: str
    compiler: str
    version: str
    manifest: dict[str, Any]
    zip_sha256: str
    files: list[PackFile] = field(default_factory=list)


class PackProblems(Invalid):
    """Everything wrong with a pack, each with where it is."""


def parse(data: bytes, zip_sha256: str | None = None) -> Pack:
    """A verified pack from a zip's bytes, or PackProblems listing every problem found."""
    problems: list[dict[str, str]] = []

    def problem(where: str, message: str) -> None:
        problems.append({"field": where, "message": message})

    digest = hashlib.sha256(data).hexdigest()
    if zip_sha256 is not None and zip_sha256 != digest:
        problem("zip", f"the zip's sha256 is {digest}, not {zip_sha256} as the release's SHA256SUMS.txt says: "
                "it was changed or is another file")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        names = archive.namelist()
    except zipfile.BadZipFile as exc:
        raise PackProblems(f"not a zip file: {exc}", field="zip") from None
    manifests = [n for n in names if PurePosixPath(n).name == MANIFEST]
    if len(manifests) != 1:
        raise PackProblems(f"a pack holds exactly one {MANIFEST}; this zip holds {len(manifests)}", field="zip")
    folder = PurePosixPath(manifests[0]).parent
    try:
        manifest = json.loads(archive.read(manifests[0]))
    except (ValueError, UnicodeDecodeError) as exc:
        raise PackProblems(f"{MANIFEST} is not JSON: {exc}", field=MANIFEST) from None
    if not isinstance(manifest, dict):
        raise PackProblems(f"{MANIFEST} is not a JSON object", field=MANIFEST)
    pack_id, compiler, version = _identity(manifest, problem)
    sums = _sums(archive, folder, names, problem)
    listed = manifest.get("acfs")
    if not isinstance(listed, list) or not listed:
        problem(f"{MANIFEST}.acfs", "the manifest lists no ACFs (acfs: [{filename, sha256, size_bytes}, ...])")
        listed = []
    if len(listed) > MAX_FILES:
        problem(f"{MANIFEST}.acfs", f"a pack holds at most {MAX_FILES} ACFs, not {len(listed)}")
        listed = []
    members = {PurePosixPath(n).name: n for n in names if PurePosixPath(n).parent == folder and n.endswith(".acf")}
    files: list[PackFile] = []
    for index, entry in enumerate(listed):
        file = _file(archive, members, sums, entry, f"{MANIFEST}.acfs.{index}", problem)
        if file is not None:
            files.append(file)
    for extra in sorted(set(members) - {f.filename for f in files} - {e.get("filename") for e in listed
                                                                       if isinstance(e, dict)}):
        problem(extra, f"{extra} is in the zip but not in the manifest")
    if problems:
        summary = "; ".join(f"{p['field']}: {p['message']}" for p in problems[:5])
        raise PackProblems(f"the pack is not imported: {summary}", field=problems[0]["field"], errors=problems)
    display = str(manifest.get("display_name") or pack_id)[:200]
    return Pack(pack_id, display, compiler, version, manifest, digest, files)


def _identity(manifest: dict[str, Any], problem: Any) -> tuple[str, str, str]:
    pack_id = manifest.get("pack_id")
    if not isinstance(pack_id, str) or not _PACK_ID.match(pack_id):
        problem(f"{MANIFEST}.pack_id", "pack_id must be letters, digits, '.', '_' and '-' (100 at most)")
        pack_id = ""
    stage = str(manifest.get("controls_stage") or "").strip().lower()
    compiler = STAGES.get(stage, "")
    if not compiler:
        problem(f"{MANIFEST}.controls_stage", f"controls_stage must name the compiler the ACFs are for "
                f"({' or '.join(STAGES)}), not {manifest.get('controls_stage')!r}")
    release = _RELEASE.match(str(manifest.get("cuda_version") or ""))
    if release is None:
        problem(f"{MANIFEST}.cuda_version", "cuda_version must name the compiler release the ACFs were generated "
                f"for (13.3), not {manifest.get('cuda_version')!r}: an ACF applies only with that release")
    return pack_id, compiler, f"{release.group(1)}.{release.group(2)}" if release else ""


def _sums(archive: zipfile.ZipFile, folder: PurePosixPath, names: list[str], problem: Any) -> dict[str, str]:
    path = str(folder / SUMS) if str(folder) != "." else SUMS
    if path not in names:
        return {}
    sums: dict[str, str] = {}
    for number, line in enumerate(archive.read(path).decode("utf-8", "replace").splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 2 or not _SHA.match(fields[0]):
            problem(f"{SUMS}:{number}", "expected '<sha256>  <file name>'")
            continue
        sums[fields[1].lstrip("*")] = fields[0]
    return sums


def _file(archive: zipfile.ZipFile, members: dict[str, str], sums: dict[str, str], entry: Any, where: str,
          problem: Any) -> PackFile | None:
    if not isinstance(entry, dict):
        problem(where, "each ACF entry is an object {filename, sha256, size_bytes}")
        return None
    name, sha, size = entry.get("filename"), entry.get("sha256"), entry.get("size_bytes")
    if not isinstance(name, str) or "/" in name or "\\" in name or not name.endswith(".acf"):
        problem(f"{where}.filename", f"{name!r} is not an .acf file name of the pack's folder")
        return None
    if name not in members:
        problem(f"{where}.filename", f"{name} is listed in the manifest but not in the zip")
        return None
    info = archive.getinfo(members[name])
    if info.file_size > MAX_ACF_BYTES:
        problem(f"{where}.size_bytes", f"{name} is {info.file_size} bytes, over the {MAX_ACF_BYTES} an ACF may be")
        return None
    content = archive.read(members[name])
    actual = hashlib.sha256(content).hexdigest()
    ok = True
    if sha != actual:
        problem(f"{where}.sha256", f"{name}'s sha256 is {actual}, the manifest says {sha}")
        ok = False
    if size != len(content):
        problem(f"{where}.size_bytes", f"{name} is {len(content)} bytes, the manifest says {size}")
        ok = False
    if sums and sums.get(name) != actual:
        problem(f"{SUMS}.{name}", f"{name} is not in {SUMS}" if name not in sums
                else f"{name}'s sha256 is {actual}, {SUMS} says {sums[name]}")
        ok = False
    return PackFile(name, actual, content) if ok else None


def store(session: Session, pack: Pack, imported_by: str) -> tuple[ControlsPack, bool]:
    """The pack and its files stored; (row, whether it was new). The same pack imported
    again is a no-op; another zip under an imported pack_id is a conflict."""
    row = session.get(ControlsPack, pack.pack_id)
    if row is not None:
        if row.zip_sha256 != pack.zip_sha256:
            raise Conflict(f"pack {pack.pack_id!r} was imported from another zip (sha256 {row.zip_sha256[:12]}); "
                           "a pack's files never change under its id: give the new one its own pack_id",
                           field=f"{MANIFEST}.pack_id")
        return row, False
    known = set(session.execute(select(ControlsFile.sha256)
                                .where(ControlsFile.sha256.in_([f.sha256 for f in pack.files]))).scalars())
    for file in pack.files:
        if file.sha256 not in known:
            session.add(ControlsFile(sha256=file.sha256, content=file.content, size_bytes=len(file.content),
                                     compiler=pack.compiler, version=pack.version, origin="pack"))
            known.add(file.sha256)
    row = ControlsPack(pack_id=pack.pack_id, display_name=pack.display_name, compiler=pack.compiler,
                       version=pack.version, manifest=pack.manifest, zip_sha256=pack.zip_sha256,
                       imported_by_name=imported_by)
    session.add(row)
    session.flush()
    for position, file in enumerate(pack.files):
        session.add(ControlsPackFile(pack_id=pack.pack_id, filename=file.filename, sha256=file.sha256,
                                     position=position))
    session.flush()
    return row, True


def build(pack_id: str, files: dict[str, bytes], *, compiler: str, version: str, display_name: str = "",
          description: str = "") -> bytes:
    """A pack zip in the same layout (the inverse of `parse`): `files` by file name, listed in
    the manifest and in SHA256SUMS.txt, in a folder named after the pack."""
    entries = [{"filename": name, "sha256": hashlib.sha256(content).hexdigest(), "size_bytes": len(content)}
               for name, content in files.items()]
    manifest = {"pack_id": pack_id, "display_name": display_name or pack_id, "description": description,
                "controls_stage": compiler, "cuda_version": version, "acfs": entries}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{pack_id}/{MANIFEST}", json.dumps(manifest, indent=2) + "\n")
        archive.writestr(f"{pack_id}/{SUMS}", "".join(f"{e['sha256']}  {e['filename']}\n" for e in entries))
        for name, content in files.items():
            archive.writestr(f"{pack_id}/{name}", content)
    return buffer.getvalue()
