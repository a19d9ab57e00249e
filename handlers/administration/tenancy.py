"""Who may administer what: the rules behind the `admin` and `workspace:admin` scopes.

`admin` is the operator's: every workspace, credit, new workspaces, any scope; it also grants `workspace:admin`.
`workspace:admin` administers the calling key's own workspace: its keys (with their limits and budgets) and its name.
Another workspace's objects are answered exactly like unknown ones (404, or left out of a list), so that ids are no
oracle. A key grants only scopes it holds, and changes or revokes only keys whose scopes are all among its own: it
never raises a key, itself included, above itself.

Through the API no key revokes itself or its own workspace, or changes more of itself than its name: an admin key
that took its own scopes away, expired or revoked itself would leave the API without its administrator, and a fuzzer
holding one key would lock itself out halfway through. Another admin key or the CLI does it. The CLI is the
operator's door: it acts as OPERATOR, with no calling key.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from generated import errors as codes
from generated.scopes import ADMIN, WORKSPACE_ADMIN
from handlers.errors import ApiError
from handlers.store.base import Actor, Key

_ALSO_GRANTED_BY = {WORKSPACE_ADMIN: ADMIN}  # a scope an operation needs -> the scope that grants it too


def holds(scopes: Iterable[str], needed: str) -> bool:
    """Whether keys with these scopes may call an operation that needs `needed`."""
    held = set(scopes)
    return needed in held or _ALSO_GRANTED_BY.get(needed) in held


def lacks_message(needed: str) -> str:
    also = _ALSO_GRANTED_BY.get(needed)
    more = f" ('{also}' also grants it)" if also else ""
    return f"This key lacks the '{needed}' scope needed here{more}."


@dataclass(frozen=True, slots=True)
class Authority:
    """What the caller of an administration operation may reach: `caller` is its key, None for the CLI."""

    caller: Key | None

    @property
    def operator(self) -> bool:
        return self.caller is None or ADMIN in self.caller.scopes

    @property
    def audit(self) -> Actor:
        """Who the audit log names for this caller's changes: its key, or the CLI."""
        return Actor(None if self.caller is None else self.caller.id)

    @property
    def workspace_id(self) -> str | None:
        """The one workspace the caller administers; None for every workspace."""
        return None if self.operator or self.caller is None else self.caller.workspace_id

    def sees(self, workspace_id: str) -> bool:
        return self.workspace_id is None or self.workspace_id == workspace_id

    def may_grant(self, scope: str) -> bool:
        return self.operator or (self.caller is not None and scope in self.caller.scopes)

    def check_grants(self, scopes: Iterable[str], param: str) -> None:
        """403 naming the first scope (and its index in the request) that the caller may not hand out."""
        for i, scope in enumerate(scopes):
            if not self.may_grant(scope):
                raise ApiError(codes.INSUFFICIENT_SCOPE,
                               f"This key cannot grant the '{scope}' scope: it does not hold it.", param=f"{param}.{i}")

    def check_manages(self, key: Key) -> None:
        """403 when the key holds a scope the caller does not: it may be read, not changed."""
        for scope in key.scopes:
            if not self.may_grant(scope):
                raise ApiError(codes.INSUFFICIENT_SCOPE,
                               f"This key cannot change key {key.id!r}: it holds the '{scope}' scope, which this key "
                               "does not.")

    def check_not_self(self, key_id: str, changes: Iterable[str] = ("revoked_at",)) -> None:
        """403 when the caller would revoke itself or change more of itself than its name."""
        if self.caller is not None and self.caller.id == key_id and set(changes) - {"name"}:
            raise ApiError(codes.CANNOT_MODIFY_SELF,
                           "A key cannot revoke itself or change more than its own name through the API: use another "
                           "admin key or `specway keys`.")

    def check_not_own_workspace(self, workspace_id: str) -> None:
        if self.caller is not None and self.caller.workspace_id == workspace_id:
            raise ApiError(codes.CANNOT_MODIFY_SELF,
                           "A key cannot revoke its own workspace (that would revoke the key itself): use another "
                           "admin key or `specway workspaces revoke`.")


OPERATOR = Authority(None)
