"""The running gateway: config, catalog, store, upstream clients and background writers, for one process."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from generated.config import Config, TimeoutSettings
from handlers import config as config_mod
from handlers.administration.auth import KeyCache
from handlers.administration.tenancy import OPERATOR, Authority
from handlers.errors import StoreUnavailable
from handlers.inference.cooldown import Cooldowns, SharedCooldowns
from handlers.inference.deployments import Deployments
from handlers.inference.upstreams.base import Upstream
from handlers.metering import money
from handlers.metering.ledger import Ledger
from handlers.metering.meter import Meter
from handlers.metering.ratelimit import Limiter, MemoryLimiter, RedisLimiter
from handlers.observability import looplag
from handlers.observability.decisions import Recorder
from handlers.periodic import Periodic
from handlers.reloading import Reloads, Setup
from handlers.serving.spend import Credits
from handlers.store import open_store
from handlers.store.base import Store

if TYPE_CHECKING:
    from generated.models import ConfigReload
    from handlers.inference.catalog import Catalog
    from handlers.observability.tracing import Tracing

log = logging.getLogger("specway")
_REAP_EVERY = 300.0  # seconds between looks for reservations a dead process left held (a backstop: see _beat)
_MISSED_BEATS = 3  # heartbeats a process may miss before its holds and leases are released
_PRUNE_AUDIT_EVERY = 3600.0  # seconds between deletions of audit entries past audit.retention_days
_current: contextvars.ContextVar[Gateway] = contextvars.ContextVar("specway_gateway")
_pinned: contextvars.ContextVar[Setup | None] = contextvars.ContextVar("specway_setup", default=None)


def _data_versions() -> str:
    from handlers.inference import known

    return ", ".join(f"{name} {version}" for name, version in known.versions().items())


def current() -> Gateway:
    return _current.get()


class Gateway:
    def __init__(self, config: Config, *, store: Store | None = None, path: str | None = None) -> None:
        self._setup = Setup.of(config)  # what a reload replaces (handlers/reloading.py); requests pin theirs
        self._retiring: set[Setup] = set()  # replaced, with requests still in flight on them
        self._reloads = Reloads(self, path)
        self.store = store or open_store(config.store.url, float(config.store.timeout_seconds))
        self.keys = KeyCache(self.store, ttl=float(config.server.key_cache_seconds))
        self.recorder = Recorder(self.store, float(config.decisions.retention_days), self.revision)
        self.ledger = Ledger(self.store, config.ledger)
        # The one writer of settlements and decision records: each lease's charge with its records, then the rest.
        self._writer = Periodic(self.write, self.ledger.flush_seconds, "write settlements and decision records")
        self._money_waits = False  # a lease ran low (or a settlement waits) since the writer last synced the leases
        self.ledger.wake = self._wake_for_money
        self.recorder.wake = self._writer.wake
        self.ledger.records = self.recorder  # a lease's sync writes the records of what it charges
        cd, limits = config.cooldown, config.limits
        breaker = (cd.failures, float(cd.window_seconds), float(cd.seconds))
        self.cooldowns = SharedCooldowns(limits.redis_url, *breaker) if limits.redis_url else Cooldowns(*breaker)
        self.deployments = Deployments(config.balancing)  # in flight, latency and affinity, in this process
        self.credits = Credits(self.store, float(config.server.key_cache_seconds))  # for the policies' step-down
        self.limiter: Limiter = (RedisLimiter(limits.redis_url, on_error=limits.on_redis_error)
                                 if limits.redis_url else MemoryLimiter())
        self.meter = Meter(self.store, self.limiter, self.ledger)
        self.limits_fail_open = limits.on_redis_error == "open"
        self._reaper = Periodic(self._release_stale, _REAP_EVERY, "release stale reservations")
        self._beat_every = float(config.ledger.heartbeat_seconds)
        self._heart = Periodic(self._beat, self._beat_every, "beat and release what stopped processes hold")
        self._audit_pruner = Periodic(self._prune_audit, _PRUNE_AUDIT_EVERY, "prune old audit entries")
        self.started_at = datetime.now(UTC).replace(microsecond=0)
        self.tracing: Tracing | None = None  # made at start when telemetry.otlp_endpoint is set
        self.loop_lag = looplag.LoopLag()

    @property
    def setup(self) -> Setup:
        """The Setup of the request being served (pinned when it began), else the latest."""
        return _pinned.get() or self._setup

    @property
    def latest(self) -> Setup:
        """The Setup new requests get."""
        return self._setup

    @property
    def config(self) -> Config:
        return self.setup.config

    @property
    def catalog(self) -> Catalog:
        return self.setup.catalog

    @property
    def upstreams(self) -> dict[str, Upstream]:
        return self.setup.upstreams

    @property
    def revision(self) -> str:
        return self.setup.revision

    def pin(self) -> tuple[Setup, contextvars.Token[Setup | None]]:
        """The request now beginning runs on the latest Setup to its end, whatever a reload swaps meanwhile."""
        setup = self._setup
        setup.users += 1
        return setup, _pinned.set(setup)

    def unpin(self, pinned: tuple[Setup, contextvars.Token[Setup | None]]) -> None:
        setup, token = pinned
        _pinned.reset(token)
        setup.users -= 1
        if setup.retired and not setup.users and setup in self._retiring:
            self._retiring.discard(setup)
            self._reloads.retire(setup.only_mine(self._setup))

    def swap(self, new: Setup) -> Setup:
        """`new` serves every request from now on; the old one closes what only it used once its requests are over."""
        old, self._setup = self._setup, new
        old.retired = True
        if self.tracing is not None:
            self.tracing.instrument(new.only_mine(old))
        self.cooldowns.tune(new.config.cooldown.failures, float(new.config.cooldown.window_seconds),
                            float(new.config.cooldown.seconds))
        self.deployments.tune(new.config.balancing)
        if old.users:
            self._retiring.add(old)
        else:
            self._reloads.retire(old.only_mine(new))
        return old

    async def reload(self, actor: Authority = OPERATOR) -> ConfigReload:
        return await self._reloads.reload(actor)

    def _stale_after(self) -> timedelta:
        """Longer than any request can live (its upstream's total timeout, then the drain at shutdown): a hold
        older than this belongs to a process that died, and would otherwise stay held forever."""
        totals = [float(u.timeouts.total) for u in self.config.upstreams.values()]
        drain = float(self.config.server.drain_seconds)
        return timedelta(seconds=2 * max(totals, default=TimeoutSettings().total) + drain + 60)

    async def _release_stale(self) -> None:
        released = await self.store.release_stale(datetime.now(UTC) - self._stale_after(), money.finish)
        if released:
            log.warning("released %d reservation(s) left by a process that stopped without settling", released)

    async def _beat(self) -> None:
        """Say this process is alive, and free what processes that stopped beating still hold."""
        now = datetime.now(UTC)
        try:
            await self.store.heartbeat(now)
            dead_before = now - timedelta(seconds=_MISSED_BEATS * self._beat_every)
            released = await self.store.release_orphans(dead_before, money.finish)
        except StoreUnavailable:
            return  # the writer reports the store's absence; the beats resume when it is back
        if released:
            log.warning("released %d hold(s) and lease(s) of a process that stopped beating", released)

    async def _prune_audit(self) -> None:
        with contextlib.suppress(StoreUnavailable):  # tried again within the hour
            await self.store.prune_audit(datetime.now(UTC) - timedelta(days=float(self.config.audit.retention_days)))

    async def _retire(self) -> None:
        with contextlib.suppress(StoreUnavailable):  # then the others forget this process after three beats
            await self.store.retire()

    @classmethod
    def from_file(cls, path: str | None = None) -> Gateway:
        return cls(config_mod.load(path), path=path)

    def bind(self) -> contextvars.Token[Gateway]:
        return _current.set(self)

    async def start(self) -> None:
        log.info("configuration revision %s", self.revision)
        if self.catalog.unknown:
            log.warning("the known-model data (%s) does not know these models and the configuration prices none of "
                        "them: free, not reasoning, no context window: %s", _data_versions(),
                        ", ".join(self.catalog.unknown))
        try:
            self._setup.connect()
            if self.config.telemetry.otlp_endpoint is not None:
                self.tracing = _tracing(self.config, self.upstreams.values())
            await self.store.open()
            await self.limiter.ping()  # fail fast when Redis is configured but unreachable
        except BaseException:
            await self._close()  # what was opened must not keep the process alive (aiosqlite's threads would)
            raise
        await self._beat()  # before the first hold, so none is ever without a beat behind it
        self.recorder.start()
        self._writer.start()
        self.keys.start()
        self._reaper.start()
        self._heart.start()
        self._audit_pruner.start()
        self._reloads.listen()
        self.loop_lag.start()
        looplag.freeze_startup()

    async def write(self, final: bool = False) -> None:
        self._money_waits = False
        await self.ledger.flush(final)
        await self.recorder.flush(between=None if final else self._money_first)

    def _wake_for_money(self) -> None:
        self._money_waits = True
        self._writer.wake()

    async def _money_first(self) -> None:
        """Between two batches of decision records: the leases are synced first when one ran low meanwhile. Woken
        in the middle of a long flush, the writer came back to the leases only after the last batch, and the
        requests that found a lease dry meanwhile waited for one (tests/test_loop_lag.py)."""
        if self._money_waits:
            self._money_waits = False
            await self.ledger.flush()

    async def _drain(self) -> None:
        """At shutdown: write everything and give every lease back, retrying while the store is away, for at most
        the drain time; then say exactly what could not be written."""
        await self._writer.stop()
        deadline = time.monotonic() + max(float(self.config.server.drain_seconds), 1.0)
        while True:
            try:
                await self.write(final=True)
            except Exception:
                log.exception("could not write settlements and decision records at shutdown; retrying")
            (spent, settlements), records = self.ledger.unwritten(), self.recorder.unwritten()
            if not (spent or settlements or records or self.ledger.leased()) or time.monotonic() > deadline:
                break
            await asyncio.sleep(min(self.ledger.flush_seconds, 0.5))
        if spent or settlements or records:
            log.error("stopping with the store away: %s of spending, %d settlement(s) and %d decision record(s) could "
                      "not be written and are lost", spent, settlements, records)

    async def stop(self) -> None:
        """Flush what is pending, then close; one step failing does not keep the others from running."""
        self._reloads.stop_listening()
        looplag.thaw()
        await self._close(self.loop_lag.stop, self._heart.stop, self._reaper.stop, self._audit_pruner.stop,
                          self.recorder.stop, self._drain, self._retire, self.keys.stop, self._reloads.drain,
                          self._close_retiring)

    async def _close_retiring(self) -> None:
        """The clients of replaced Setups whose requests were still in flight when the server stopped."""
        for setup in list(self._retiring):
            for up in setup.only_mine(self._setup):
                await up.aclose()
        self._retiring.clear()

    async def _close(self, *first: Callable[[], Awaitable[object]]) -> None:
        steps = [*first, *(up.aclose for up in self.upstreams.values()), self.limiter.aclose, self.cooldowns.aclose,
                 self.store.close, *([self.tracing.shutdown] if self.tracing else [])]  # the last spans flushed
        for step in steps:
            try:
                await step()
            except Exception:
                log.exception("shutdown step %s failed", getattr(step, "__qualname__", step))

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Any = None) -> AsyncIterator[None]:
        await self.start()
        try:
            yield
        finally:
            await self.stop()


def _tracing(config: Config, upstreams: Iterable[Upstream]) -> Tracing:
    """The process's tracer, its exporter's thread started here (in the worker); OpenTelemetry is imported only now."""
    from handlers.observability.tracing import Tracing

    tracing = Tracing(config.telemetry)
    tracing.instrument(upstreams)
    return tracing
