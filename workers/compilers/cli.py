"""`paretune toolchain`: the pinned CUDA toolchains (nvidia-cuda-nvcc) a worker may compile with."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from workers.compilers import toolchains

toolchain_app = typer.Typer(help="CUDA toolchains (nvidia-cuda-nvcc at an exact version) for workers.",
                            no_args_is_help=True)


@toolchain_app.command("list")
def list_toolchains() -> None:
    """The toolchains installed here, the one workers use by default first."""
    found = toolchains.installed()
    if not found:
        typer.echo(f"none: `paretune toolchain install {toolchains.PACKAGE}==VERSION` installs one "
                   f"(or pip install 'paretune[acf]')")
        return
    for index, toolchain in enumerate(found):
        typer.echo(f"{toolchain.version}\t{toolchain.root}{'  (default)' if index == 0 else ''}")


@toolchain_app.command("install")
def install_toolchain(
    requested: Annotated[str, typer.Argument(help=f"an exact version: 13.5.37 or {toolchains.PACKAGE}==13.5.37")],
    directory: Annotated[Path | None, typer.Option(
        help=f"where toolchains live (default: ${toolchains.TOOLCHAINS_ENV} or ~/.local/share/paretune/toolchains)",
    )] = None,
) -> None:
    """Install a toolchain from the package registry beside the others (pip install --target),
    for `paretune worker --toolchain VERSION`."""
    try:
        toolchain = toolchains.install(requested, directory)
    except toolchains.ToolchainError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"{toolchain.version}\t{toolchain.root}")
