"""`specway serve`: check what the configuration names, make the first key on a fresh store, run uvicorn.

Imported only when `serve` runs, so that the other commands do not pay for what it needs."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import logging.config
import os
import resource
import sys
import tempfile
from typing import Any

from generated.config import Config
from generated.scopes import SCOPES
from handlers import config as config_mod
from handlers.administration.tenancy import OPERATOR
from handlers.cli.actions import default_workspace, redact, with_store
from handlers.cli.admin import Unreachable
from handlers.config_names import ENV_SUPERVISOR
from handlers.metering.ratelimit import RedisLimiter
from handlers.store.base import Store


async def first_key(store: Store, _cfg: object = None) -> str | None:
    """On a fresh store, a first key with every scope, so the quickstart needs nothing else."""
    if await store.list_keys():
        return None
    _, secret = await store.create_key(await default_workspace(store), "first key", SCOPES, audit=OPERATOR.audit)
    return secret


async def _ready_first_key(store: Store, cfg: Config) -> str | None:
    """Fail fast when an upstream's key variable is unset or Redis is configured but away; then the first key on a
    fresh store."""
    for name, settings in cfg.upstreams.items():
        config_mod.api_key(name, settings)  # a ConfigError names the variable
    from handlers.observability.metrics import token

    token(cfg.server)  # likewise the /metrics token's, before any worker starts (and restarts) on it
    url = cfg.limits.redis_url
    if url:
        limiter = RedisLimiter(url)
        try:
            await limiter.ping()
        except Exception as exc:  # noqa: BLE001 - whatever the cause, say which dependency and stop
            raise Unreachable(f"cannot reach Redis at {redact(url)} ({type(exc).__name__}: {exc})") from None
        finally:
            await limiter.aclose()
    return await first_key(store)


def _logging(level: str) -> dict[str, Any]:
    """Every log as JSON lines on stderr (stdout carries only what a script captures: a new key)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "handlers.observability.requestlog.JsonLines"}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["stderr"], "level": level.upper()},
        "loggers": {"uvicorn": {"level": level.upper()}, "uvicorn.access": {"level": "WARNING"}},
    }


def _share_metrics_between_workers() -> None:
    """prometheus-client's multiprocess mode: set before any worker imports it."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="specway-metrics-")


def _raise_open_files_limit(connections: int) -> None:
    """Every connection is an open file, and so is each upstream call it makes: take the hard limit, as Go's runtime
    does, and say so when even that cannot fit `server.max_connections` twice over."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 2 * connections + 100)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < 2 * connections + 100:
        logging.getLogger("specway").warning(
            "the open-files limit (%d) is below twice server.max_connections (%d): connections beyond it will be "
            "refused by the system, not answered 503; raise `ulimit -n` or lower server.max_connections", soft,
            connections)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from handlers.edge import connections

    cfg = config_mod.load(args.config)
    server = cfg.server
    logging.config.dictConfig(_logging(server.log_level))  # uvicorn applies the same; this covers what comes first
    host, port = args.host or server.host, args.port if args.port is not None else server.port
    workers = args.workers or server.workers
    secret = asyncio.run(with_store(args.config, _ready_first_key))
    if secret:
        print("Created the first relay key (it is shown only this once):", file=sys.stderr)
        print(secret, flush=True)
    if args.config:
        os.environ[config_mod.ENV_CONFIG] = os.path.abspath(args.config)
    _raise_open_files_limit(server.max_connections)
    log_level = server.log_level
    # No WebSockets: the API has none, and an upgraded connection would leave the connection count behind.
    common: dict[str, Any] = {"host": host, "port": port, "log_level": log_level, "loop": "uvloop", "ws": "none",
                              "http": connections.protocol(server), "timeout_keep_alive": server.keepalive_seconds,
                              "timeout_graceful_shutdown": server.drain_seconds,
                              "log_config": _logging(log_level), "access_log": False}
    if workers > 1:
        _share_metrics_between_workers()
        _supervise(uvicorn.Config("handlers.edge.app:factory", factory=True, workers=workers,
                                  timeout_worker_healthcheck=server.worker_healthcheck_seconds, **common))
    else:
        from handlers.edge.app import create_app

        uvicorn.run(create_app(cfg), **common)
    return 0


def _supervise(config: Any) -> None:
    """uvicorn's worker supervisor, but SIGHUP reloads the configuration in every worker (handlers/reloading.py)
    instead of restarting them: one worker reloads and audits it, then asks (SIGUSR1) for the others to follow
    (SIGUSR2), so that a broken file is refused once and every worker keeps serving."""
    import signal

    from uvicorn.supervisors import Multiprocess

    class Supervisor(Multiprocess):
        def _tell(self, sig: int, processes: list[Any]) -> None:
            for process in processes:
                if process.pid is not None:
                    with contextlib.suppress(OSError):  # it just stopped: its replacement reads the file anew
                        os.kill(process.pid, sig)

        def handle_hup(self) -> None:
            self._tell(signal.SIGHUP, self.processes[:1])

        def handle_usr1(self) -> None:
            self._tell(signal.SIGUSR2, self.processes)

    os.environ[ENV_SUPERVISOR] = str(os.getpid())
    sock = config.bind_socket()
    try:
        Supervisor(config, sockets=[sock]).run()
    except KeyboardInterrupt:
        pass
