"""The specway command: serve, keys, db, generate."""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from handlers import config as config_mod
from handlers.store import open_store
from handlers.store.base import SCOPES, Store

ALL_SCOPES = ",".join(SCOPES)


async def _with_store(cfg_path: str | None, fn: Callable[[Store], Awaitable[Any]]) -> Any:
    cfg = config_mod.load(cfg_path)
    store = open_store(cfg.store.url)  # type: ignore[union-attr]
    await store.open()
    try:
        return await fn(store)
    finally:
        await store.close()


async def _default_workspace(store: Store) -> str:
    workspaces = await store.list_workspaces()
    if workspaces:
        return workspaces[0].id
    return (await store.create_workspace("default")).id


async def first_key(store: Store) -> str | None:
    """On a fresh store, a first key with every scope, so the quickstart needs nothing else."""
    if await store.list_keys():
        return None
    ws = await _default_workspace(store)
    _, secret = await store.create_key(ws, "first key", SCOPES)
    return secret


def _scopes(text: str) -> tuple[str, ...]:
    scopes = tuple(s.strip() for s in text.split(",") if s.strip())
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown:
        raise SystemExit(f"specway: unknown scope(s) {', '.join(unknown)}; known: {ALL_SCOPES}")
    return scopes


def _logs_to_stderr() -> dict[str, Any]:
    """uvicorn's logging, all of it on stderr: stdout carries only what a script captures (a new key)."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    for handler in config["handlers"].values():
        handler["stream"] = "ext://sys.stderr"
    return config


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    cfg = config_mod.load(args.config)
    server = cfg.server
    host, port = args.host or server.host, args.port if args.port is not None else server.port  # type: ignore[union-attr]
    workers = args.workers or server.workers  # type: ignore[union-attr]
    secret = asyncio.run(_with_store(args.config, first_key))
    if secret:
        print("Created the first relay key (it is shown only this once):", file=sys.stderr)
        print(secret, flush=True)
    if args.config:
        os.environ[config_mod.ENV_CONFIG] = os.path.abspath(args.config)
    log_level = server.log_level  # type: ignore[union-attr]
    common: dict[str, Any] = {"host": host, "port": port, "log_level": log_level, "loop": "uvloop", "http": "httptools",
                              "timeout_graceful_shutdown": 30, "log_config": _logs_to_stderr()}
    if workers > 1:
        uvicorn.run("handlers.app:factory", factory=True, workers=workers, **common)
    else:
        from handlers.app import create_app

        uvicorn.run(create_app(cfg), **common)
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    async def create(store: Store) -> str:
        ws = args.workspace or await _default_workspace(store)
        models = tuple(m for m in args.models.split(",") if m) if args.models else None
        _, secret = await store.create_key(ws, args.name, _scopes(args.scopes), models=models, policy=args.policy)
        return secret

    async def listing(store: Store) -> None:
        for k in await store.list_keys(args.workspace):
            state = "revoked" if k.revoked_at else "active"
            print(f"{k.id}\t{k.name}\t{k.hint}\t{','.join(k.scopes)}\t{state}\t{k.workspace_id}")

    async def revoke(store: Store) -> int:
        key = await store.revoke_key(args.key_id)
        if key is None:
            print(f"specway: no key {args.key_id}", file=sys.stderr)
            return 1
        print(f"revoked {key.id}")
        return 0

    if args.action == "create":
        print(asyncio.run(_with_store(args.config, create)))
        return 0
    if args.action == "list":
        asyncio.run(_with_store(args.config, listing))
        return 0
    return int(asyncio.run(_with_store(args.config, revoke)))


def cmd_db(args: argparse.Namespace) -> int:
    async def noop(store: Store) -> None:
        return None

    asyncio.run(_with_store(args.config, noop))  # opening the store applies pending migrations
    print("database schema is up to date")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from generator.__main__ import main as generate

    return generate(["--check"] if args.check else [])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specway", description="A self-hostable LLM API gateway.")
    p.add_argument("--config", "-c", help=f"configuration file (default: ${config_mod.ENV_CONFIG}, else built-in)")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the gateway")
    s.add_argument("--host")
    s.add_argument("--port", type=int)
    s.add_argument("--workers", type=int)
    s.set_defaults(fn=cmd_serve)
    k = sub.add_parser("keys", help="create, list and revoke relay keys")
    ksub = k.add_subparsers(dest="action", required=True)
    kc = ksub.add_parser("create", help="create a key; prints its secret, once, alone on stdout")
    kc.add_argument("--name", required=True)
    kc.add_argument("--scopes", default="inference,models:read,key:read,explain:read")
    kc.add_argument("--workspace", help="workspace id (default: the first workspace)")
    kc.add_argument("--models", help="comma-separated allowlist of model ids or aliases")
    kc.add_argument("--policy", help="routing policy name")
    kl = ksub.add_parser("list", help="list keys (never their secrets)")
    kl.add_argument("--workspace")
    kr = ksub.add_parser("revoke", help="revoke a key by id")
    kr.add_argument("key_id")
    k.set_defaults(fn=cmd_keys)
    d = sub.add_parser("db", help="database schema")
    d.add_argument("action", choices=["upgrade"])
    d.set_defaults(fn=cmd_db)
    g = sub.add_parser("generate", help="regenerate openapi.json and generated/ from specs/")
    g.add_argument("--check", action="store_true")
    g.set_defaults(fn=cmd_generate)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except config_mod.ConfigError as exc:
        print(f"specway: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
