"""What every router's schemas share: the one error shape, UTC times and stored text. Each
domain keeps its own schemas beside its router (service.studies.schemas, ...)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from service.store.models import Worker, as_utc

# every stored time is UTC; SQLite gives them back without a zone, which RFC 3339 needs
Utc = Annotated[datetime, AfterValidator(as_utc)]
# text stored in the database: no NUL characters, which no Postgres text column can hold
Name = Annotated[str, Field(pattern=r"^[^\x00]*$")]


class FieldError(BaseModel):
    field: str
    message: str


class ErrorBody(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str = Field(description="invalid, not_found, forbidden, unauthorized, conflict, too_large, ...")
    message: str = Field(description="what was wrong and how to fix it")
    field: str | None = Field(description="the field at fault (dotted path), if one is")
    errors: list[FieldError] | None = Field(default=None, description="every invalid field, for a 422")


class ErrorOut(BaseModel):
    """The one shape of every 4xx and 5xx answer."""

    error: ErrorBody


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": description} for status, description in (
        (401, "no token, or an unknown, revoked or expired one"),
        (403, "the token's role or kind does not allow this"),
        (404, "no such object in the caller's team"),
        (409, "a state conflict"),
        (413, "the request body is over the limit"),
        (422, "a parameter or body that does not validate"),
        (429, "too many failed authentications from this client; see Retry-After"),
    )
}


# what service.workers.router answers; it moves beside that router with the rest of service.workers
class WorkerOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    pool: str
    backends: list[str]
    energy: bool
    fingerprint: dict[str, Any]
    registered_at: Utc
    last_seen_at: Utc
    trials_done: int = Field(description="trials this worker has reported (completed or failed)")

    @classmethod
    def of(cls, worker: Worker, trials_done: int) -> WorkerOut:
        return cls(id=worker.id, name=worker.name, pool=worker.pool, backends=worker.backends, energy=worker.energy,
                   fingerprint=worker.fingerprint, registered_at=worker.registered_at,
                   last_seen_at=worker.last_seen_at, trials_done=trials_done)
