"""What the accounts API takes and answers: tokens, teams and the caller."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from service.accounts.tokens import MAX_GRACE_S, MAX_LIFETIME_S
from service.api.schemas import Name, Utc


class TokenOut(BaseModel):
    id: int
    name: str
    kind: str
    role: str
    team: str | None
    pool: str | None
    superuser: bool
    prefix: str
    created_at: Utc
    expires_at: Utc | None = Field(description="when the token stops working; null: never")
    revoked_at: Utc | None = Field(
        description="set while a rotated token's grace period runs: when it stops working")
    replaced_by: int | None = Field(description="the token this one was rotated into")
    token: str | None = Field(default=None, description="the secret, shown only at creation and rotation")


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name = Field(min_length=1, max_length=200)
    kind: Literal["user", "worker"] = "user"
    role: Literal["viewer", "member", "approver", "admin"] = "member"
    team: Name | None = Field(default=None, max_length=100, description="default: the caller's team")
    pool: Name = Field(default="default", min_length=1, max_length=100, description="worker tokens: their pool")
    superuser: bool = Field(default=False, description="an operator token (only the operator creates these)")
    expires_in: int | None = Field(default=None, ge=1, le=MAX_LIFETIME_S,
                                   description="seconds until the token expires; null: never")


class RotateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    grace_s: int = Field(default=0, ge=0, le=MAX_GRACE_S,
                         description="seconds the old secret keeps working (0: it stops at once)")
    expires_in: int | None = Field(default=None, ge=1, le=MAX_LIFETIME_S,
                                   description="the new token's lifetime; default: the old token's lifetime")


class TeamIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.\-]+$")


class TeamOut(BaseModel):
    id: int
    name: str


class MeOut(BaseModel):
    name: str
    kind: str
    role: str
    team: str | None
    superuser: bool
    expires_at: Utc | None = Field(description="when this token stops working; null: never")
