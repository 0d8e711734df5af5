"""The wire package: what the control plane and the workers share (the wire contract, the
artifact document, canonical JSON, the backends' option names, the built-in kernel catalog,
target matching). The service and the workers import only this package from each other."""

from importlib import metadata


def paretune_version() -> str:
    try:
        return metadata.version("paretune")
    except metadata.PackageNotFoundError:
        return "0+unknown"
