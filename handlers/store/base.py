"""The store interface: workspaces, relay keys, spend reservations and decision records.

Two backends implement it (SQLite, the embedded default, and PostgreSQL); one test suite runs on both.
Money is Decimal everywhere; secrets are never stored, only their SHA-256.
"""

from __future__ import annotations

import abc
import functools
import hashlib
import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

from generated import scopes as spec_scopes
from generated.config import StoreSettings

if TYPE_CHECKING:
    from prometheus_client import Histogram

DEFAULT_TIMEOUT = float(StoreSettings().timeout_seconds)  # seconds: the config's default, for stores opened without one
SCOPES = spec_scopes.SCOPES  # every relay-key scope: the spec's Scope enum
BudgetPeriod = Literal["total", "daily", "monthly"]
SECRET_PREFIX = "sk-sw-"


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    # Secrets carry 256 random bits, so a fast hash is enough (no dictionary to attack).
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(slots=True)
class Limits:
    budget: Decimal | None = None  # per budget_period, in the catalog's currency
    budget_period: BudgetPeriod = "total"
    rpm: int | None = None  # requests per minute
    tpm: int | None = None  # tokens per minute


@dataclass(slots=True)
class Workspace:
    id: str
    name: str
    credit: Decimal  # balance left to spend (settled spend already deducted)
    reserved: Decimal  # held by requests in flight
    spend_total: Decimal
    created_at: datetime
    revoked_at: datetime | None = None  # a state: its keys are refused, it takes no keys or credit, until restored


class WorkspaceRevoked(Exception):
    """A change a revoked workspace does not take (a new key, credit), refused inside the transaction that read it."""


@dataclass(slots=True)
class Key:
    id: str
    workspace_id: str
    name: str
    hint: str  # the secret's first characters, for lists; never enough to use it
    scopes: tuple[str, ...]
    models: tuple[str, ...] | None  # allowlist of model ids / aliases; None = every model
    policy: str | None  # routing policy name; None = the config's default
    expires_at: datetime | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    limits: Limits = field(default_factory=Limits)
    spend_total: Decimal = Decimal(0)
    spend_period: Decimal = Decimal(0)  # spend in the current budget period
    period_start: datetime | None = None
    reserved: Decimal = Decimal(0)
    workspace_revoked_at: datetime | None = None  # read with the key, so a cached key carries its workspace's state
    rotated_at: datetime | None = None  # the last rotation: a new secret for the same key
    previous_expires_at: datetime | None = None  # until when the secret before it still works (its grace)
    by_previous_secret: bool = False  # this copy was found by that previous secret

    def active(self, now: datetime) -> bool:
        previous_ok = not self.by_previous_secret or (self.previous_expires_at is not None
                                                      and self.previous_expires_at > now)
        return (self.revoked_at is None and self.workspace_revoked_at is None and previous_ok
                and (self.expires_at is None or self.expires_at > now))

    def rotating(self, now: datetime) -> bool:
        """Whether the previous secret of a rotation still works."""
        return self.previous_expires_at is not None and self.previous_expires_at > now


@dataclass(frozen=True, slots=True)
class Actor:
    """Who makes an administration change, for the audit log: a relay key, or the operator's CLI (None)."""

    key_id: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEntry:
    """One administration change: who, when, what, and each field it changed, before and after (never a secret)."""

    id: str
    at: datetime
    actor_key_id: str | None  # None: the operator's CLI
    action: str  # workspace.create, key.rotate, ... (handlers/store/audit.py)
    target_type: str  # workspace, key, config
    target_id: str
    workspace_id: str | None  # the workspace it concerns (None: none, a configuration reload)
    changes: dict[str, dict[str, Any]]  # field -> {"before": value or None, "after": value or None}


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditQuery:
    limit: int = 100
    before: tuple[datetime, str] | None = None  # a cursor: only entries older than this (time, id)
    workspace_id: str | None = None
    actor_key_id: str | None = None
    action: str | None = None
    target_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None


class Refused(Exception):
    """A hold that cannot be paid for, raised by a hold rule. `reason` is 'credit' or 'budget'; `leased`, set by the
    store, says that leases held by running processes hold part of what is missing (they give it back within a flush
    or two)."""

    def __init__(self, reason: Literal["credit", "budget"], message: str, leased: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.leased = leased


@dataclass(frozen=True, slots=True)
class Books:
    """A key, its workspace and what one reservation of theirs holds, as a money transaction read them (rows locked).

    A money rule (handlers/metering/money.py) takes it and returns it changed; the store writes what it returns:
    the key's and the workspace's money columns, and `held` as what the reservation holds from then on."""

    key: Key
    workspace: Workspace
    held: Decimal = Decimal(0)  # 0 for a reservation not made yet, or one no longer held


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseReport:
    """What a process tells the store about one of its leases at a sync."""

    lease_id: str | None  # None: no lease yet
    key_id: str
    spent: Decimal  # settled by its requests since the last sync
    in_flight: Decimal  # held now by its requests


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    lease_id: str | None  # None: no lease is held any more
    amount: Decimal  # held in the store for the lease now (spent already deducted)
    useful: bool  # big enough for requests to draw on


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionQuery:
    """Which decision records to list, newest first: each field that is set narrows the list."""

    workspace_id: str | None = None
    key_id: str | None = None
    model: str | None = None  # as usage counts it: the model that answered, or else the one asked for
    outcome: str | None = None  # one outcome, or "error" for every outcome but ok
    start: datetime | None = None  # made at or after
    end: datetime | None = None  # made before
    before: tuple[datetime, str] | None = None  # (created_at, id) of the last record of the page before
    limit: int = 50


# The money rules the store runs inside its transactions (handlers/metering/money.py): the store reads the rows,
# passes them to the rule the metering layer gave it, and writes what the rule returns; it decides nothing itself.
# (the key and workspace, nothing held yet; the amount; now) -> them holding it. Raises Refused.
HoldRule = Callable[[Books, Decimal, datetime], Books]
# (the key and workspace, what the reservation holds; its cost, None when released) -> them with it finished.
FinishRule = Callable[[Books, Decimal | None], Books]
# (the key and workspace, what the lease holds; the process's report; now) -> them with the lease charged and
# resized, and whether it is big enough for requests to draw on.
LeaseRule = Callable[[Books, LeaseReport, datetime], tuple[Books, bool]]


@functools.cache
def store_wait() -> Histogram:
    """Defined with the store, whose layer is below observability's; /metrics serves it with the others. Made at the
    first store call, so that a command that never waits on a store never loads prometheus_client."""
    from prometheus_client import Histogram

    return Histogram("specway_store_wait_seconds", "Time a store call waited for its connection, by path: read "
                     "(key lookups and other reads) or write (transactions: holds, the writer)", ["path"],
                     buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0))


class Outage:
    """One warning when the store cannot be reached for `what`, one info line when it can again: a store that is
    away for an hour must not log a traceback at every flush or request."""

    def __init__(self, what: str, meanwhile: str, logger: logging.Logger) -> None:
        self._what = what  # "decision records"
        self._meanwhile = meanwhile  # "they stay pending and are retried"
        self._log = logger
        self.away = False

    def down(self, reason: str) -> None:
        if not self.away:
            self.away = True
            self._log.warning("the store cannot be reached for %s (%s): %s", self._what, reason, self._meanwhile)

    def up(self) -> None:
        if self.away:
            self.away = False
            self._log.info("the store is reachable again for %s", self._what)


class Store(abc.ABC):
    timeout: float = DEFAULT_TIMEOUT  # seconds any one call may wait on the database; then StoreUnavailable

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and apply pending migrations."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def ping(self) -> None:
        """Raise when the database cannot be reached."""

    # workspaces
    @abc.abstractmethod
    async def create_workspace(self, name: str, credit: Decimal = Decimal(0), *,
                               audit: Actor | None = None) -> Workspace: ...

    @abc.abstractmethod
    async def get_workspace(self, workspace_id: str) -> Workspace | None: ...

    @abc.abstractmethod
    async def list_workspaces(self) -> list[Workspace]: ...

    @abc.abstractmethod
    async def rename_workspace(self, workspace_id: str, name: str, *, audit: Actor | None = None) -> Workspace | None: ...

    @abc.abstractmethod
    async def add_credit(self, workspace_id: str, amount: Decimal, *, audit: Actor | None = None) -> Workspace | None:
        """Add to the balance (negative: a correction); WorkspaceRevoked when the workspace is revoked."""

    @abc.abstractmethod
    async def set_workspace_revoked(self, workspace_id: str, revoked: bool, *,
                                    audit: Actor | None = None) -> Workspace | None:
        """Revoke (keeping the first time when revoked already) or restore a workspace; None when unknown."""

    # keys
    @abc.abstractmethod
    async def create_key(
        self,
        workspace_id: str,
        name: str,
        scopes: tuple[str, ...],
        *,
        models: tuple[str, ...] | None = None,
        policy: str | None = None,
        expires_at: datetime | None = None,
        limits: Limits | None = None,
        audit: Actor | None = None,
    ) -> tuple[Key, str]:
        """Create a key; return it and its secret (the only time the secret exists in clear). LookupError for an
        unknown workspace, WorkspaceRevoked for a revoked one."""

    @abc.abstractmethod
    async def key_by_secret(self, secret: str) -> Key | None:
        """One indexed read by the secret's hash, current or previous (`by_previous_secret` says which; whether the
        previous one's grace is over is for the caller to judge, as `Key.active` does)."""

    @abc.abstractmethod
    async def rotate_key(self, key_id: str, grace: timedelta, *,
                         audit: Actor | None = None) -> tuple[Key, str] | None:
        """A new secret for the key (same id, limits, spend); the current one stays valid for `grace` (none when it is
        zero), replacing any earlier previous secret. Returns the key and the new secret; None for an unknown key;
        WorkspaceRevoked for a key of a revoked workspace."""

    @abc.abstractmethod
    async def get_key(self, key_id: str) -> Key | None: ...

    @abc.abstractmethod
    async def list_keys(self, workspace_id: str | None = None) -> list[Key]: ...

    @abc.abstractmethod
    async def update_key(self, key_id: str, *, audit: Actor | None = None, **changes: Any) -> Key | None:
        """Change name, scopes, models, policy, expires_at or limits."""

    @abc.abstractmethod
    async def revoke_key(self, key_id: str, *, audit: Actor | None = None) -> Key | None: ...

    @abc.abstractmethod
    async def touch_keys(self, last_used: dict[str, datetime]) -> None:
        """Record last-used times, batched off the hot path."""

    # metering: reserve the worst case before the upstream call, finish (settle or release) after. Each is one
    # transaction that locks the rows it changes; the money rule passed in decides, the store writes what it returns.
    @abc.abstractmethod
    async def reserve(self, key_id: str, amount: Decimal, now: datetime, rule: HoldRule) -> str:
        """Atomically hold `amount` against the key's budget and its workspace's credit, as `rule` decides.

        Returns a reservation id; raises Refused when the rule refuses (with `leased` set).
        """

    @abc.abstractmethod
    async def finish(self, reservation_id: str, cost: Decimal | None, rule: FinishRule) -> None:
        """Settle a hold to its real cost, or release it without spending (None). Idempotent."""

    @abc.abstractmethod
    async def sync_lease(self, report: LeaseReport, now: datetime, rule: LeaseRule,
                         records: Sequence[dict[str, Any]] = ()) -> LeaseGrant:
        """Charge a lease's spending and resize it as `rule` decides, and save the decision records of what it
        charges (as save_decisions does), in one transaction."""

    @abc.abstractmethod
    async def release_stale(self, older_than: datetime, rule: FinishRule) -> int:
        """Release holds made before `older_than` and never settled (their process died); return how many."""

    # owners: every hold and lease carries the id of the process that took it (`owner`), which beats while alive
    @functools.cached_property
    def owner(self) -> str:
        """This process's id on the holds and leases it takes."""
        return "own_" + secrets.token_hex(12)

    @abc.abstractmethod
    async def heartbeat(self, now: datetime) -> None:
        """Say that this process (`owner`) is alive at `now`."""

    @abc.abstractmethod
    async def release_orphans(self, dead_before: datetime, rule: FinishRule) -> int:
        """Release the holds and leases of other processes whose last heartbeat is older than `dead_before` (taken
        before it), and forget such processes once nothing of theirs is held; return how many were released."""

    @abc.abstractmethod
    async def retire(self) -> None:
        """Forget this process's heartbeat (at shutdown, once its leases are given back)."""

    # decision records (written in batches by the recorder)
    @abc.abstractmethod
    async def save_decisions(self, records: list[dict[str, Any]], uncounted: frozenset[str] = frozenset()) -> None:
        """Write records, and add those written for the first time (but `uncounted`) to the usage rollups."""

    @abc.abstractmethod
    async def usage(self, start: datetime, end: datetime, workspace_id: str | None = None,
                    key_id: str | None = None) -> list[tuple[Any, Any]]:
        """The hourly usage rollups in [start, end): (hour, workspace, key, model, upstream) and their counts."""

    @abc.abstractmethod
    async def get_decision(self, decision_id: str) -> dict[str, Any] | None: ...

    @abc.abstractmethod
    async def list_decisions(self, query: DecisionQuery) -> list[dict[str, Any]]:
        """The records `query` selects, newest first (by created_at, then id), at most query.limit of them."""

    @abc.abstractmethod
    async def prune_decisions(self, older_than: datetime) -> int: ...

    # the audit log: each administration method above given an `audit` actor writes one entry, in its own
    # transaction, when it changed something
    @abc.abstractmethod
    async def record_audit(self, entry: AuditEntry) -> None:
        """Write an entry for a change made outside the store (a configuration reload)."""

    @abc.abstractmethod
    async def audit_entry(self, entry_id: str) -> AuditEntry | None: ...

    @abc.abstractmethod
    async def audit_entries(self, query: AuditQuery) -> list[AuditEntry]:
        """Entries newest first, as the query filters and pages them (up to `query.limit`)."""

    @abc.abstractmethod
    async def prune_audit(self, older_than: datetime) -> int: ...
