"""Who may manage which token.

- The operator (a superuser token) manages every token, and alone manages superuser and
  worker tokens.
- A team admin manages the user tokens of its own team, up to its own role.
- Anyone may rotate or revoke the token it is calling with.
Another team's tokens, and superuser tokens for non-operators, do not exist (404)."""

from __future__ import annotations

from dataclasses import dataclass

from service.accounts.tokens import ROLE_RANK, Principal
from service.errors import Forbidden, NotFound


@dataclass(frozen=True)
class TokenFacts:
    id: int
    kind: str
    role: str
    team_id: int | None
    superuser: bool


def visible(actor: Principal, target: TokenFacts) -> bool:
    """Whether `actor` may know `target` exists."""
    if actor.superuser or target.id == actor.token_id:
        return True
    return actor.kind == "user" and not target.superuser and target.kind == "user" and target.team_id == actor.team_id


def may_manage(actor: Principal, target: TokenFacts) -> bool:
    if actor.kind != "user":
        return False
    if actor.superuser or target.id == actor.token_id:
        return True
    return (
        visible(actor, target)
        and actor.role == "admin"
        and ROLE_RANK.get(target.role, len(ROLE_RANK)) <= ROLE_RANK[actor.role]
    )


def check_manage(actor: Principal, target: TokenFacts | None, token_id: int) -> None:
    """Raise 404 when the token is unknown or invisible to `actor`, 403 when it is visible
    but not `actor`'s to manage."""
    if target is None or not visible(actor, target):
        raise NotFound(f"no token {token_id} in your team", field="token_id")
    if not may_manage(actor, target):
        raise Forbidden(f"only a team admin manages other tokens of the team; your token has {actor.role}",
                        field="token_id")


def check_create(actor: Principal, *, kind: str, role: str, superuser: bool) -> None:
    actor.require("admin")
    if (superuser or kind == "worker") and not actor.superuser:
        what = "superuser" if superuser else "worker"
        raise Forbidden(f"only the operator's (superuser) token creates {what} tokens",
                        field="superuser" if superuser else "kind")
    if kind == "user" and role in ROLE_RANK and ROLE_RANK[role] > ROLE_RANK[actor.role]:
        raise Forbidden(f"a token cannot create a role above its own ({actor.role})", field="role")
