"""Which worker agents this control plane serves: the wire contract version check, and what
changed between versions.

Every worker request carries `X-Paretune-Contract: N` (wire/contract.py CONTRACT_VERSION of
the worker's release). The service serves versions OLDEST_WORKER_CONTRACT..CONTRACT_VERSION,
so a control plane upgraded first keeps serving the fleet it had; a worker newer than the
service, or older than it still supports, gets a 400 naming both versions. A request without
the header is taken as version 1, the contract of releases before the header existed.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Header
from pydantic import BaseModel

from service.errors import ApiError
from wire.contract import CONTRACT_HEADER, CONTRACT_VERSION

OLDEST_WORKER_CONTRACT = 1  # raise only once no worker of an older contract may still run
UNVERSIONED_CONTRACT = 1
KIND_AND_WORK = 4  # the first contract whose leases name their kind and carry its `work`


class IncompatibleWorker(ApiError):
    status = 400
    code = "incompatible_worker"


async def check_worker_contract(
    version: Annotated[str | None, Header(alias=CONTRACT_HEADER)] = None,
) -> int:
    """The request's contract version, if this service serves it."""
    served = f"versions {OLDEST_WORKER_CONTRACT} to {CONTRACT_VERSION}"
    try:
        worker = UNVERSIONED_CONTRACT if version is None else int(version)
    except ValueError:
        raise IncompatibleWorker(f"{CONTRACT_HEADER} must be a whole number (this service serves {served}), "
                                 f"not {version!r}", field=CONTRACT_HEADER) from None
    if worker > CONTRACT_VERSION:
        raise IncompatibleWorker(
            f"this worker speaks wire contract {worker}; this control plane serves {served}: "
            "upgrade the control plane before its workers", field=CONTRACT_HEADER,
            worker_contract=worker, service_contract=CONTRACT_VERSION)
    if worker < OLDEST_WORKER_CONTRACT:
        raise IncompatibleWorker(
            f"this worker speaks wire contract {worker}; this control plane serves {served}: "
            "upgrade the worker (pip install -U paretune, or the new worker image)", field=CONTRACT_HEADER,
            worker_contract=worker, service_contract=CONTRACT_VERSION)
    return worker


Contract = Annotated[int, Depends(check_worker_contract)]


def lease_fields(contract: int, kind: str, work: BaseModel) -> dict[str, Any]:
    """The fields of a wire.Lease that carry `work`: its kind and the work for contract 4
    and later; the field named after the kind (`trial`, `validation`) before, the only kinds
    such workers run."""
    return {"kind": kind, "work": work} if contract >= KIND_AND_WORK else {kind: work}
