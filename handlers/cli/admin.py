"""`specway keys ...` and `specway workspaces ...`: the admin API's logic (handlers.administration.accounts), from a shell."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import pydantic

from generated import models
from generated.config import Config
from generated.scopes import DEFAULT_SCOPES, SCOPES
from handlers import config as config_mod
from handlers.administration import accounts as admin
from handlers.errors import ApiError, validation_error
from handlers.inference.catalog import Catalog
from handlers.store import open_store
from handlers.store.base import Store

Action = Callable[[Store, Config], Awaitable[Any]]
M = TypeVar("M", bound=pydantic.BaseModel)


class StoreUnreachable(Exception):
    """The configured store cannot be opened; the message names it (never its password)."""


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
    return (await store.create_workspace("default")).id


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> int:
    """Whole seconds from `90s`, `30m`, `24h`, `7d` or a plain number of seconds."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    if not number.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 90s, 30m, 24h or 7d")
    return int(number) * _UNITS[unit]


def _csv(text: str | None) -> list[str] | None:
    return None if text is None else [s.strip() for s in text.split(",") if s.strip()]


def validated(model: type[M], fields: dict[str, Any]) -> M:
    """The fields as the API would take them: through the same generated model, with the same messages."""
    try:
        return model.model_validate_json(json.dumps(fields))
    except pydantic.ValidationError as exc:
        raise validation_error(exc) from None


def _key_body(args: argparse.Namespace, model: type[M]) -> M:
    fields: dict[str, Any] = {}
    for name in ("name", "policy", "expires_at", "workspace_id"):
        if getattr(args, name, None) is not None:
            fields[name] = getattr(args, name)
    for name in ("scopes", "models"):
        if getattr(args, name, None) is not None:
            fields[name] = _csv(getattr(args, name))
    limits = {k: getattr(args, k) for k in ("budget", "budget_period", "rpm", "tpm") if getattr(args, k, None) is not None}
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


def cmd_keys(args: argparse.Namespace) -> int:
    async def create(store: Store, cfg: Config) -> str:
        body = _key_body(args, models.KeyCreate)
        created = await admin.create_key(store, Catalog.from_config(cfg), cfg.policies, body,
                                         await default_workspace(store))
        return created.secret  # alone on stdout, so a script can capture it

    async def update(store: Store, cfg: Config) -> models.Key:
        body = _key_body(args, models.KeyUpdate)
        return await admin.update_key(store, Catalog.from_config(cfg), cfg.policies, args.key_id, body)

    async def listing(store: Store, cfg: Config) -> str | list[models.Key]:
        keys = await store.list_keys(args.workspace)
        if args.json:
            return [admin.key_out(k) for k in keys]
        rows = ["id\tname\thint\tscopes\tstate\tworkspace"]
        for k in keys:
            state = "revoked" if k.revoked_at else "revoked (workspace)" if k.workspace_revoked_at else "active"
            rows.append("\t".join((k.id, k.name, k.hint, ",".join(k.scopes), state, k.workspace_id)))
        return "\n".join(rows)

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

    actions: dict[str, Action] = {"create": create, "update": update, "list": listing, "show": show, "revoke": revoke,
                                  "rotate": rotate}
    return run(args, actions[args.action])


def cmd_usage(args: argparse.Namespace) -> int:
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
        rows = [[str(row[c]) for c in head] for row in found["data"]]
        rows.append(["total", *[""] * len(names), *(str(found["totals"][c]) for c in head[len(names) + 1:])])
        return "\n".join("\t".join(r) for r in [head, *rows])

    return run(args, show)


def cmd_workspaces(args: argparse.Namespace) -> int:
    async def create(store: Store, cfg: Config) -> models.Workspace:
        body = validated(models.WorkspaceCreate, {"name": args.name, "credit": args.credit})
        return await admin.create_workspace(store, body)

    async def listing(store: Store, cfg: Config) -> list[models.Workspace]:
        return [admin.workspace_out(w) for w in await store.list_workspaces()]

    async def credit(store: Store, cfg: Config) -> models.Workspace:
        body = validated(models.CreditAdd, {"amount": args.amount})
        return await admin.add_credit(store, args.workspace_id, body)

    async def revoke(store: Store, cfg: Config) -> str:
        return f"revoked {(await admin.revoke_workspace(store, args.workspace_id)).id}"

    async def restore(store: Store, cfg: Config) -> str:
        return f"restored {(await admin.restore_workspace(store, args.workspace_id)).id}"

    actions: dict[str, Action] = {"create": create, "list": listing, "credit": credit, "revoke": revoke,
                                  "restore": restore}
    return run(args, actions[args.action])


def _key_options(p: argparse.ArgumentParser, create: bool) -> None:
    p.add_argument("--name", required=create)
    p.add_argument("--scopes", default=",".join(DEFAULT_SCOPES) if create else None,
                   help=f"comma-separated: {', '.join(SCOPES)}")
    p.add_argument("--models", help="comma-separated allowlist of model ids or aliases")
    p.add_argument("--policy", help="routing policy name")
    p.add_argument("--expires-at", dest="expires_at", help="ISO 8601 time, e.g. 2027-01-01T00:00:00+00:00")
    p.add_argument("--budget", help="spend allowed per budget period, e.g. 25.00")
    p.add_argument("--budget-period", dest="budget_period", choices=["total", "daily", "monthly"])
    p.add_argument("--rpm", type=int, help="requests per minute")
    p.add_argument("--tpm", type=int, help="tokens per minute")


def add_parsers(sub: Any) -> None:
    k = sub.add_parser("keys", help="create, update, list and revoke relay keys")
    ksub = k.add_subparsers(dest="action", required=True)
    kc = ksub.add_parser("create", help="create a key; prints its secret, once, alone on stdout")
    _key_options(kc, create=True)
    kc.add_argument("--workspace", dest="workspace_id", help="workspace id (default: the first workspace)")
    ku = ksub.add_parser("update", help="change a key (only the options given)")
    ku.add_argument("key_id")
    _key_options(ku, create=False)
    kl = ksub.add_parser("list", help="list keys (never their secrets): a table, or JSON with --json")
    kl.add_argument("--workspace")
    kl.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ks = ksub.add_parser("show", help="one key as JSON (never its secret)")
    ks.add_argument("key_id")
    ks.add_argument("--json", action="store_true", help="JSON (the default: accepted for symmetry)")
    kr = ksub.add_parser("revoke", help="revoke a key by id")
    kr.add_argument("key_id")
    kt = ksub.add_parser("rotate", help="a new secret for a key (same id, limits, spend); prints it, once, alone on "
                         "stdout; the previous secret works for the grace period")
    kt.add_argument("key_id")
    kt.add_argument("--grace", type=duration, default=86400, metavar="DURATION",
                    help="how long the previous secret keeps working: 90s, 30m, 24h, 7d, or 0 to stop it at once "
                    "(default: 24h)")
    k.set_defaults(fn=cmd_keys)
    w = sub.add_parser("workspaces", help="create and list workspaces, add credit")
    wsub = w.add_subparsers(dest="action", required=True)
    wc = wsub.add_parser("create", help="create a workspace")
    wc.add_argument("--name", required=True)
    wc.add_argument("--credit", default="0")
    wl = wsub.add_parser("list", help="list workspaces, as JSON")
    wl.add_argument("--json", action="store_true", help="JSON (the default: accepted for symmetry)")
    wa = wsub.add_parser("credit", help="add credit to a workspace")
    wa.add_argument("workspace_id")
    wa.add_argument("amount")
    wr = wsub.add_parser("revoke", help="revoke a workspace: its keys, new keys and credit are refused until restored")
    wr.add_argument("workspace_id")
    wo = wsub.add_parser("restore", help="restore a revoked workspace: its keys work again")
    wo.add_argument("workspace_id")
    w.set_defaults(fn=cmd_workspaces)
    u = sub.add_parser("usage", help="requests, tokens, cost and errors over a time range (every workspace)")
    u.add_argument("--start", help="ISO 8601 (default: a day before --end)")
    u.add_argument("--end", help="ISO 8601 (default: now)")
    u.add_argument("--bucket", choices=["hour", "day"], default="day")
    u.add_argument("--group-by", dest="group_by", default="", help="comma-separated: key, model, upstream, workspace")
    u.add_argument("--workspace", help="only this workspace")
    u.add_argument("--key", help="only this key id")
    u.add_argument("--json", action="store_true", help="print GET /v1/usage's JSON instead of a table")
    u.set_defaults(fn=cmd_usage)
