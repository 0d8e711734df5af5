"""The options every command that talks to a control plane takes, one definition for the
`paretune` CLI and its `artifact` and `acf` groups."""

from __future__ import annotations

from typing import Annotated

import typer

ServerOpt = Annotated[str, typer.Option(envvar="PARETUNE_SERVER", help="control plane URL")]
TokenOpt = Annotated[str, typer.Option(envvar="PARETUNE_TOKEN", help="API token")]
DEFAULT_SERVER = "http://127.0.0.1:8000"
