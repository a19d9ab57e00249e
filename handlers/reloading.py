"""What a configuration reload swaps (a Setup: the catalog, policies and upstream clients of one revision), and the
rules of a reload: which settings it takes, which only a restart applies, which upstream clients it keeps.

Each request pins the Setup it started on (handlers/gateway.py `pin`), so a request or a stream in flight finishes
on its own configuration; a replaced Setup closes the clients it alone used once its last request is over."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from generated import errors as codes
from generated.config import Config
from handlers import config as config_mod
from handlers.administration import audit
from handlers.administration.tenancy import OPERATOR, Authority
from handlers.config_names import ENV_SUPERVISOR, ConfigError
from handlers.errors import ApiError
from handlers.inference.catalog import Catalog
from handlers.inference.upstreams.base import Upstream
from handlers.inference.upstreams.registry import build_upstream
from handlers.observability import looplag, metrics

if TYPE_CHECKING:
    from generated import models
    from handlers.gateway import Gateway

log = logging.getLogger("specway")

# The top-level settings a reload swaps in, in the order the answer lists them; every other one needs a restart (a
# listening socket, the store, Redis, the writer's and the tracer's settings belong to the process).
RELOADABLE = ("upstreams", "models", "policies", "default_policy", "cooldown", "balancing", "retries")
RESTART_ONLY = tuple(name for name in Config.model_fields if name not in RELOADABLE)


@dataclass(eq=False)
class Setup:
    config: Config
    catalog: Catalog
    revision: str
    upstreams: dict[str, Upstream] = field(default_factory=dict)
    users: int = 0  # requests in flight pinned to it
    retired: bool = False

    @classmethod
    def of(cls, config: Config) -> Setup:
        return cls(config, Catalog.from_config(config), config_mod.revision(config))

    def connect(self, kept: dict[str, Upstream] | None = None) -> None:
        """Its upstream clients: those of `kept` (an earlier Setup's, by name, same settings) reused, others made."""
        kept = kept or {}
        for name, settings in self.config.upstreams.items():
            self.upstreams[name] = kept[name] if name in kept else build_upstream(name, settings)

    def only_mine(self, successor: Setup) -> list[Upstream]:
        """The clients this Setup uses that `successor` does not: closed once this one's last request is over."""
        theirs = {id(up) for up in successor.upstreams.values()}
        return [up for up in self.upstreams.values() if id(up) not in theirs]


def load(path: str | None) -> Config:
    try:
        return config_mod.load(path)
    except ConfigError as exc:
        raise ApiError(codes.CONFIG_INVALID, f"The configuration was not reloaded: {exc}") from None


def changes(old: Config, new: Config) -> list[str]:
    """The reloadable sections `new` changes; an ApiError when it changes one only a restart applies."""
    before, after = old.model_dump(mode="json"), new.model_dump(mode="json")
    restart = [name for name in RESTART_ONLY if before[name] != after[name]]
    if restart:
        raise ApiError(codes.RESTART_REQUIRED,
                       f"The configuration was not reloaded: it changes {', '.join(restart)}, which only a restart "
                       "applies. Restart the server, or reload a file without those changes.")
    return [name for name in RELOADABLE if before[name] != after[name]]


async def successor(current: Setup, config: Config) -> Setup:
    """The Setup of `config`, with `current`'s clients for the upstreams whose settings did not change. When a client
    cannot be made (an unset key variable), those made so far are closed again: a config_invalid changes nothing."""
    new = Setup.of(config)
    kept = {name: up for name, up in current.upstreams.items()
            if name in config.upstreams and current.config.upstreams.get(name) == config.upstreams[name]}
    try:
        new.connect(kept)
    except (ConfigError, OSError) as exc:
        for up in new.only_mine(current):
            await up.aclose()
        raise ApiError(codes.CONFIG_INVALID, f"The configuration was not reloaded: {exc}") from None
    return new


def summary(setup: Setup) -> dict[str, Any]:
    """What the audit log records of a Setup: its revision and the names it serves (never a secret)."""
    return {"revision": setup.revision, "upstreams": sorted(setup.config.upstreams),
            "models": sorted(m.id for m in setup.config.models), "policies": sorted(setup.config.policies)}



class Reloads:
    """The reloads of one gateway, one at a time: from POST /v1/admin/reload, SIGHUP, or a sibling worker's."""

    def __init__(self, gateway: Gateway, path: str | None = None) -> None:
        self._gw = gateway
        self.path = path  # the file it was loaded from; None: config_mod.load's own lookup, as at startup
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()  # closings and signalled reloads, kept from the collector

    async def reload(self, actor: Authority | None, *, tell_siblings: bool = True) -> models.ConfigReload:
        """Load, check and swap; audited as `actor` when something changed (the entry is written before the swap: an
        audited reload or none); None for a sibling's reload, which its first worker audited. The other workers of
        this server are then told to reload the same file."""
        from generated import models

        gw = self._gw
        async with self._lock:
            current = gw.latest
            try:
                config = load(self.path)
                sections = changes(current.config, config)
                new = await successor(current, config) if sections else current
            except ApiError as refused:
                metrics.RELOADS.labels(refused.code).inc()
                log.error("%s", refused.message)
                raise
            if sections and actor is not None:
                try:
                    await audit.record(gw.store, actor, "config.reload", ("config", self.path or "(default)"),
                                       summary(current), summary(new))
                except BaseException:
                    for up in new.only_mine(current):
                        await up.aclose()
                    raise
            if sections:
                gw.swap(new)
                log.info("configuration revision %s replaces %s (%s changed)", new.revision, current.revision,
                         ", ".join(sections))
            metrics.RELOADS.labels("applied" if sections else "unchanged").inc()
        signalled = tell_siblings and _tell_siblings()
        return models.ConfigReload(object="config.reload", revision=new.revision,
                                   previous_revision=current.revision, changed=bool(sections), sections=sections,
                                   other_workers_signalled=signalled)

    def retire(self, upstreams: list[Upstream]) -> None:
        """A replaced Setup's last request is over: close the clients only it used, without holding up the request
        that released it, then collect what it held and freeze what serves now (handlers/observability/looplag.py;
        one full collection on the loop per reload)."""
        async def run() -> None:
            for up in upstreams:
                await up.aclose()
            looplag.freeze_startup()

        self._spawn(run())

    def listen(self) -> None:
        """SIGHUP reloads (audited as the operator, then the siblings are told); SIGUSR2 is a sibling's word: reload
        quietly. Only in a server's main thread (not where a test runs the app in another one)."""
        loop = asyncio.get_running_loop()
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
            loop.add_signal_handler(signal.SIGHUP, self._signalled, True)
            loop.add_signal_handler(signal.SIGUSR2, self._signalled, False)
        if _HELD:  # signalled while starting: quietly, as a sibling's word (a worker that listened told the audit)
            _HELD.clear()
            self._signalled(False)

    def stop_listening(self) -> None:
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
            loop = asyncio.get_running_loop()
            loop.remove_signal_handler(signal.SIGHUP)
            loop.remove_signal_handler(signal.SIGUSR2)

    def _signalled(self, operator: bool) -> None:
        async def reload() -> None:
            with contextlib.suppress(ApiError):  # logged by reload; the configuration serving stays
                await self.reload(OPERATOR if operator else None, tell_siblings=operator)

        self._spawn(reload())

    def _spawn(self, work: Coroutine[Any, Any, object]) -> None:
        async def run() -> None:
            try:
                await work
            except Exception:
                log.exception("a configuration reload's background step failed")

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


_HELD: set[int] = set()  # the reload signals a starting worker was sent (hold_signals)


def hold_signals() -> None:
    """Until the gateway listens, a reload's signals are kept and acted on once it does: a worker that is starting
    may have read the configuration before it changed. (Ignored, as they were, such a worker kept serving the old
    configuration while its siblings reloaded: seen in CI, under `--workers 2` and `pkill -HUP`.)"""
    for sig in (signal.SIGHUP, signal.SIGUSR2):
        signal.signal(sig, lambda signum, _frame: _HELD.add(signum))


def _tell_siblings() -> bool:
    """Under `specway serve --workers N`, ask the supervisor to have every worker reload (handlers/cli/serve.py)."""
    supervisor = os.environ.get(ENV_SUPERVISOR)
    if not supervisor or not supervisor.isdigit() or int(supervisor) != os.getppid():
        return False
    try:
        os.kill(int(supervisor), signal.SIGUSR1)
    except OSError:
        return False
    return True
