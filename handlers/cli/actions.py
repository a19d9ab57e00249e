"""What `specway keys`, `workspaces`, `usage` and `audit` do: the admin API's logic (handlers.administration), from a
shell. Imported when one of them runs; each imports what only it needs (the generated API models, the catalog) when
it needs it, so that the read-only tables start at once."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import pydantic

from generated.config import Config
from handlers import config as config_mod
from handlers.administration.tenancy import OPERATOR
from handlers.cli.admin import CLEAR, StoreUnreachable
from handlers.errors import ApiError, validation_error
from handlers.store import open_store
from handlers.store.base import Store
from handlers.store.values import money_text

Action = Callable[[Store, Config], Awaitable[Any]]
M = TypeVar("M", bound=pydantic.BaseModel)


def redact(url: str) -> str:
    """A URL fit for a message: any password replaced."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


async def with_store(cfg_path: str | None, fn: Action) -> Any:
    cfg = config_mod.load(cfg_path)
    url = cfg.store.url
    store = open_store(url, float(cfg.store.timeout_seconds))
    try:
        await store.open()
    except Exception as exc:  # noqa: BLE001 - any failure to open it: name the store and stop
        await store.close()
        raise StoreUnreachable(f"cannot open the store at {redact(url)} ({type(exc).__name__}: {exc})") from None
    try:
        return await fn(store, cfg)
    finally:
        await store.close()


async def default_workspace(store: Store) -> str:
    workspaces = await store.list_workspaces()
    if workspaces:
        return workspaces[0].id
    return (await store.create_workspace("default", audit=OPERATOR.audit)).id


def _csv(text: str | None) -> list[str] | None:
    return None if text is None else [s.strip() for s in text.split(",") if s.strip()]


def validated(model: type[M], fields: dict[str, Any]) -> M:
    """The fields as the API would take them: through the same generated model, with the same messages."""
    try:
        return model.model_validate_json(json.dumps(fields))
    except pydantic.ValidationError as exc:
        raise validation_error(exc) from None


def _key_body(args: argparse.Namespace, model: type[M]) -> M:
    """The options given, as the API's body: `none` is null (the setting removed)."""
    def value(name: str) -> Any:
        given = getattr(args, name, None)
        return None if given == CLEAR else _csv(given) if name in ("scopes", "models") else given

    given = [n for n in ("name", "policy", "expires_at", "workspace_id", "scopes", "models")
             if getattr(args, n, None) is not None]
    fields: dict[str, Any] = {name: value(name) for name in given}
    limits = {k: value(k) for k in ("budget", "budget_period", "rpm", "tpm") if getattr(args, k, None) is not None}
    if limits:
        fields["limits"] = limits
    return validated(model, fields)


def run(args: argparse.Namespace, fn: Action) -> int:
    try:
        result = asyncio.run(with_store(args.config, fn))
    except ApiError as err:
        print(f"specway: {err.message}", file=sys.stderr)
        return 2
    if result is not None:
        print(result if isinstance(result, str) else json.dumps(_plain(result), indent=2))
    return 0


def _plain(result: pydantic.BaseModel | list[pydantic.BaseModel] | dict[str, Any]) -> Any:
    if isinstance(result, dict):
        return result
    return [r.model_dump() for r in result] if isinstance(result, list) else result.model_dump()


def table(head: list[str], rows: list[list[str]]) -> str:
    """Tab-separated, a header first: what `cut -f` and `column -t -s $'\\t'` read."""
    return "\n".join("\t".join(r) for r in [head, *rows])


def keys(args: argparse.Namespace) -> int:
    from generated import models
    from handlers.administration import accounts as admin

    async def create(store: Store, cfg: Config) -> str | models.KeyCreated:
        from handlers.inference.catalog import Catalog

        body = _key_body(args, models.KeyCreate)
        created = await admin.create_key(store, Catalog.from_config(cfg), cfg.policies, body,
                                         await default_workspace(store))
        if args.json:
            return created
        print(f"created {created.id} in {created.workspace_id}; its secret, shown only this once:", file=sys.stderr)
        return created.secret  # alone on stdout, so a script can capture it

    async def update(store: Store, cfg: Config) -> models.Key:
        from handlers.inference.catalog import Catalog

        body = _key_body(args, models.KeyUpdate)
        return await admin.update_key(store, Catalog.from_config(cfg), cfg.policies, args.key_id, body)

    async def show(store: Store, cfg: Config) -> models.Key:
        return admin.key_out(await admin.key(store, args.key_id))

    async def revoke(store: Store, cfg: Config) -> str:
        return f"revoked {(await admin.revoke_key(store, args.key_id)).id}"

    async def rotate(store: Store, cfg: Config) -> str:
        body = validated(models.KeyRotate, {"grace_seconds": args.grace})
        rotated = await admin.rotate_key(store, args.key_id, body)
        until = rotated.rotation.previous_secret_expires_at if rotated.rotation else "now: it no longer works"
        print(f"rotated {rotated.id}; its previous secret works until {until}", file=sys.stderr)
        return rotated.secret  # alone on stdout, as keys create prints it

    actions: dict[str, Action] = {"create": create, "update": update, "show": show, "revoke": revoke,
                                  "rotate": rotate}
    return run(args, actions[args.action])


def key_list(args: argparse.Namespace) -> int:
    """A table from the store's rows (the API's models are imported for --json only)."""
    async def listing(store: Store, cfg: Config) -> str | list[Any]:
        found = await store.list_keys(args.workspace)
        if args.json:
            from handlers.administration.accounts import key_out

            return [key_out(k) for k in found]
        return table(["id", "name", "hint", "scopes", "state", "workspace"],
                     [[k.id, k.name, k.hint, ",".join(k.scopes), _key_state(k), k.workspace_id] for k in found])

    return run(args, listing)


def _key_state(key: Any) -> str:
    return "revoked" if key.revoked_at else "revoked (workspace)" if key.workspace_revoked_at else "active"


def usage(args: argparse.Namespace) -> int:
    """The operator's GET /v1/usage: every workspace, read from the same rollups."""
    from handlers.observability.usage import dimensions, report, time_range

    async def show(store: Store, cfg: Config) -> str | dict[str, Any]:
        since, until = time_range(args.start, args.end)
        dims = dimensions(args.group_by)
        found = report(await store.usage(since, until, args.workspace, args.key), since, until, args.bucket, dims)
        if args.json:
            return found
        names = [{"key": "key_id", "workspace": "workspace_id"}.get(d, d) for d in dims]
        head = ["start", *names, "requests", "errors", "input_tokens", "output_tokens", "cached_input_tokens", "cost"]
        rows = [["-" if row[c] is None else str(row[c]) for c in head] for row in found["data"]]
        rows.append(["total", *[""] * len(names), *(str(found["totals"][c]) for c in head[len(names) + 1:])])
        return table(head, rows)

    return run(args, show)


def workspaces(args: argparse.Namespace) -> int:
    from generated import models
    from handlers.administration import accounts as admin

    async def create(store: Store, cfg: Config) -> models.Workspace:
        body = validated(models.WorkspaceCreate, {"name": args.name, "credit": args.credit})
        return await admin.create_workspace(store, body)

    async def credit(store: Store, cfg: Config) -> models.Workspace:
        body = validated(models.CreditAdd, {"amount": args.amount})
        return await admin.add_credit(store, args.workspace_id, body)

    async def revoke(store: Store, cfg: Config) -> str:
        return f"revoked {(await admin.revoke_workspace(store, args.workspace_id)).id}"

    async def restore(store: Store, cfg: Config) -> str:
        return f"restored {(await admin.restore_workspace(store, args.workspace_id)).id}"

    actions: dict[str, Action] = {"create": create, "credit": credit, "revoke": revoke, "restore": restore}
    return run(args, actions[args.action])


def workspace_list(args: argparse.Namespace) -> int:
    async def listing(store: Store, cfg: Config) -> str | list[Any]:
        found = await store.list_workspaces()
        if args.json:
            from handlers.administration.accounts import workspace_out

            return [workspace_out(w) for w in found]
        return table(["id", "name", "state", "credit", "reserved", "spend_total", "created_at"],
                     [[w.id, w.name, "active" if w.revoked_at is None else "revoked", money_text(w.credit),
                       money_text(w.reserved), money_text(w.spend_total), w.created_at.isoformat()] for w in found])

    return run(args, listing)


def audit(args: argparse.Namespace) -> int:
    """The operator's GET /v1/audit: every workspace's entries, newest first."""
    from handlers.administration import audit as log

    async def show(store: Store, cfg: Config) -> str | dict[str, Any]:
        found, cursor = await log.page(store, OPERATOR, limit=args.limit, cursor=args.cursor,
                                       workspace_id=args.workspace, key_id=args.key, action=args.action,
                                       target_id=args.target, since=args.since, until=args.until)
        if args.json:
            return log.list_out(found, cursor).model_dump()
        if cursor:
            print(f"more: specway audit --cursor {cursor}", file=sys.stderr)
        return table(["at", "by", "action", "target", "changes"],
                     [[e.at.isoformat(), e.actor_key_id or "cli", e.action, e.target_id, _changes(e.changes)]
                      for e in found])

    return run(args, show)


def _changes(changes: dict[str, dict[str, Any]]) -> str:
    return "; ".join(f"{name}: {_shown(c['before'])} -> {_shown(c['after'])}" for name, c in changes.items())


def _shown(value: Any) -> str:
    return "-" if value is None else value if isinstance(value, str) else json.dumps(value)
