"""One suite, two backends: every limiter test runs on MemoryLimiter (on a fake clock) and on RedisLimiter.

Redis: SPECWAY_TEST_REDIS_URL (default redis://127.0.0.1:6379/0), a fresh random key prefix per test whose keys are
deleted afterwards. Unreachable: skip, or fail when CI=true. Outage and recovery tests start a redis-server of their
own on a free port (skipped when the binary is missing, failing under CI). Timing assertions only bound from one side, with slack.
"""

from __future__ import annotations

import asyncio
import logging
import math
import multiprocessing
import os
import secrets
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from handlers.metering.ratelimit import (
    MAX_LIMIT,
    Limiter,
    MemoryLimiter,
    RedisLimiter,
    Verdict,
    headers,
    retry_headers,
)
from tests.conftest import tool, unavailable

REDIS_URL = os.environ.get("SPECWAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@dataclass
class Backend:
    kind: str
    limiter: Limiter
    advance: Callable[[float], Awaitable[None]]  # let this much time pass for the limiter

    def slack(self, limit: int) -> int:
        """Units a real clock may replenish while a test runs (about 0.6 s worth); none on the fake clock."""
        return 0 if self.kind == "memory" else limit // 100 + 1


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _admin() -> aioredis.Redis:
    client = aioredis.from_url(REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        await client.ping()
    except (RedisError, OSError) as exc:
        await client.aclose()
        message = f"Redis at {REDIS_URL} unreachable: {type(exc).__name__}"
        unavailable(message)
    return client


@pytest.fixture
async def admin() -> AsyncIterator[aioredis.Redis]:
    client = await _admin()
    yield client
    await client.aclose()


@pytest.fixture
def prefix() -> str:
    return f"specway:test:{secrets.token_hex(6)}:"


@pytest.fixture(params=["memory", "redis"])
async def backend(request: pytest.FixtureRequest, prefix: str) -> AsyncIterator[Backend]:
    if request.param == "memory":
        clock = FakeClock()

        async def tick(seconds: float) -> None:
            clock.now += seconds

        yield Backend("memory", MemoryLimiter(clock), tick)
        return
    admin = await _admin()
    # "closed": a Redis failure in the middle of a test shows as refusals, never as a silent pass.
    limiter = RedisLimiter(REDIS_URL, prefix=prefix, on_error="closed")

    async def sleep(seconds: float) -> None:
        await asyncio.sleep(seconds + 0.02)  # event loops may wake a hair early

    try:
        yield Backend("redis", limiter, sleep)
    finally:
        await limiter.aclose()
        async for key in admin.scan_iter(match=prefix + "*"):
            await admin.delete(key)
        await admin.aclose()


# the algorithm, on both backends


async def test_burst_admits_exactly_the_limit(backend: Backend) -> None:
    verdicts = await asyncio.gather(*(backend.limiter.hit("k", 60) for _ in range(100)))
    allowed = [v for v in verdicts if v.allowed]
    refused = [v for v in verdicts if not v.allowed]
    assert len(allowed) == 60
    assert sorted(v.remaining for v in allowed) == list(range(60))
    assert all(v.retry_after is None for v in allowed)
    for v in refused:
        assert v.remaining == 0 and v.limit == 60
        assert v.retry_after is not None and 0.4 < v.retry_after <= 1.0  # one unit frees every second
        assert 55 < v.reset_seconds <= 60


async def test_honouring_retry_after_lets_the_next_hit_through(backend: Backend) -> None:
    limiter = backend.limiter
    assert all(v.allowed for v in await asyncio.gather(*(limiter.hit("k", 120) for _ in range(120))))
    refused = await limiter.hit("k", 120)
    assert not refused.allowed and refused.retry_after is not None
    assert 0.2 < refused.retry_after <= 0.5
    await backend.advance(refused.retry_after)
    assert (await limiter.hit("k", 120)).allowed
    assert not (await limiter.hit("k", 120)).allowed


async def test_token_costs_and_refunds(backend: Backend) -> None:
    limiter, slack = backend.limiter, backend.slack(1000)
    assert (await limiter.hit("t", 1000, 400)).remaining == 600
    second = await limiter.hit("t", 1000, 400)
    assert second.allowed and 200 <= second.remaining <= 200 + slack
    assert 47 < second.reset_seconds <= 48  # 800 tokens at 1000 a minute
    short = await limiter.hit("t", 1000, 400)  # about 200 tokens short: 12 s at 1000 a minute
    assert not short.allowed and short.remaining == 0
    assert short.retry_after is not None and 11 < short.retry_after <= 12
    await limiter.refund("t", 1000, 300)
    assert 500 <= (await limiter.peek("t", 1000)).remaining <= 500 + slack
    assert 100 <= (await limiter.hit("t", 1000, 400)).remaining <= 100 + slack
    await limiter.refund("t", 1000, 5000)  # more than was used: the bucket is full, not fuller
    full = await limiter.peek("t", 1000)
    assert full == Verdict(True, 1000, 1000, 0.0, None)


async def test_cost_above_the_limit_is_refused_with_a_finite_wait(backend: Backend) -> None:
    limiter = backend.limiter
    fresh = await limiter.hit("t", 100, 101)
    assert not fresh.allowed and fresh.remaining == 0
    assert fresh.retry_after is not None and 0 < fresh.retry_after <= 60
    assert (await limiter.hit("t", 100, 50)).allowed
    later = await limiter.hit("t", 100, 10**6)
    assert later.retry_after is not None and 29 < later.retry_after <= 30  # until full: 50 units at 100 a minute
    assert 50 <= (await limiter.peek("t", 100)).remaining <= 50 + backend.slack(100)  # refusals consume nothing


async def test_peek_reads_without_consuming(backend: Backend) -> None:
    limiter = backend.limiter
    assert await limiter.peek("k", 3) == Verdict(True, 3, 3, 0.0, None)
    assert await limiter.peek("k", 3) == Verdict(True, 3, 3, 0.0, None)
    assert (await limiter.hit("k", 3)).remaining == 2
    assert (await limiter.peek("k", 3)).remaining == 2
    await limiter.hit("k", 3, 2)
    empty = await limiter.peek("k", 3)
    assert not empty.allowed and empty.remaining == 0
    assert empty.retry_after is not None and 19 < empty.retry_after <= 20


async def test_buckets_are_independent(backend: Backend) -> None:
    assert (await backend.limiter.hit("a", 1)).allowed
    assert not (await backend.limiter.hit("a", 1)).allowed
    assert (await backend.limiter.hit("b", 1)).allowed


async def test_a_changed_limit_keeps_the_units_used(backend: Backend) -> None:
    await backend.limiter.hit("k", 60, 30)
    assert 90 <= (await backend.limiter.peek("k", 120)).remaining <= 90 + backend.slack(120)


@pytest.mark.parametrize(("limit", "cost"), [(0, 1), (-5, 1), (MAX_LIMIT + 1, 1), (10, -1)])
async def test_invalid_arguments(backend: Backend, limit: int, cost: int) -> None:
    with pytest.raises(ValueError):
        await backend.limiter.hit("k", limit, cost)
    with pytest.raises(ValueError):
        await backend.limiter.refund("k", limit, cost)


# MemoryLimiter only


async def test_memory_retry_after_is_exact() -> None:
    clock = FakeClock()
    limiter = MemoryLimiter(clock)
    for _ in range(7):
        assert (await limiter.hit("k", 7)).allowed  # 60/7 s apart: exact, no float drift
    refused = await limiter.hit("k", 7)
    assert refused.retry_after == pytest.approx(60 / 7, abs=0.001)
    clock.now += refused.retry_after - 0.002
    assert not (await limiter.hit("k", 7)).allowed
    clock.now += 0.002
    assert (await limiter.hit("k", 7)).allowed


async def test_memory_forgets_drained_buckets() -> None:
    clock = FakeClock()
    limiter = MemoryLimiter(clock)
    for i in range(2000):
        await limiter.hit(f"k{i}", 60)
    clock.now += 2
    for i in range(1100):
        await limiter.hit(f"new{i}", 60)
    assert len(limiter._buckets) < 2000


# RedisLimiter only


async def test_redis_keys_expire_and_a_full_bucket_has_none(admin: aioredis.Redis, prefix: str) -> None:
    limiter = RedisLimiter(REDIS_URL, prefix=prefix)
    try:
        await limiter.hit("k", 60)
        assert 0 < await admin.pttl(prefix + "k") <= 2000  # drained in 1 s, plus a second of grace
        await limiter.refund("k", 60, 1)
        assert not await admin.exists(prefix + "k")
    finally:
        await limiter.aclose()


def _hits_in_process(url: str, prefix: str, start: Any, results: Any) -> None:
    async def run() -> int:
        limiter = RedisLimiter(url, prefix=prefix, on_error="closed")  # an error can only lower the count
        try:
            await limiter.ping()
            start.wait(30)
            verdicts = await asyncio.gather(*(limiter.hit("shared", 60) for _ in range(50)))
        finally:
            await limiter.aclose()
        return sum(v.allowed for v in verdicts)

    results.put(asyncio.run(run()))


async def test_two_processes_share_one_bucket(admin: aioredis.Redis, prefix: str) -> None:
    spawn = multiprocessing.get_context("spawn")
    start, results = spawn.Barrier(2), spawn.Queue()
    workers = [spawn.Process(target=_hits_in_process, args=(REDIS_URL, prefix, start, results)) for _ in range(2)]
    for worker in workers:
        worker.start()
    try:
        counts = [await asyncio.to_thread(results.get, timeout=60) for _ in workers]
    finally:
        for worker in workers:
            await asyncio.to_thread(worker.join, 10)
        await admin.delete(prefix + "shared")
    assert [w.exitcode for w in workers] == [0, 0]
    assert sum(counts) == 60


# a redis-server of the test's own, for outages


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 5
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@contextmanager
def _redis_server(port: int, where: Path) -> Iterator[None]:
    tool("redis-server")
    tool("redis-cli")
    options = ["--save", "", "--appendonly", "no", "--daemonize", "yes", "--bind", "127.0.0.1"]
    files = ["--dir", str(where), "--pidfile", str(where / f"{port}.pid"), "--logfile", str(where / f"{port}.log")]
    subprocess.run(["redis-server", "--port", str(port), *options, *files], check=True, capture_output=True)
    try:
        _wait(lambda: _answers(port), f"redis-server on port {port}")
        yield
    finally:
        subprocess.run(
            ["redis-cli", "-p", str(port), "shutdown", "nosave"], check=False, capture_output=True, timeout=10
        )
        _wait(lambda: not _answers(port), f"redis-server on port {port} to stop")


async def test_script_cache_flush_falls_back_to_loading_it(tmp_path: Path) -> None:
    port = _free_port()
    with _redis_server(port, tmp_path):
        limiter = RedisLimiter(f"redis://127.0.0.1:{port}/0", on_error="closed")
        try:
            assert (await limiter.hit("k", 60)).remaining == 59
            await limiter._redis.script_flush()
            assert (await limiter.hit("k", 60)).remaining == 58
        finally:
            await limiter.aclose()


async def test_unreachable_redis_fails_open_or_closed(caplog: pytest.LogCaptureFixture) -> None:
    url = f"redis://127.0.0.1:{_free_port()}/0"
    opened, closed = RedisLimiter(url, on_error="open"), RedisLimiter(url, on_error="closed")
    try:
        for _ in range(3):
            assert await opened.hit("k", 60, 5) == Verdict(True, 60, 55, 0.0, None)  # headers as if counted
            assert await closed.hit("k", 60) == Verdict(False, 60, 0, 1.0, 1.0)
            assert not (await closed.peek("k", 60)).allowed
            await closed.refund("k", 60, 1)  # best effort: no exception
        with pytest.raises(RedisError):
            await opened.ping()
    finally:
        await opened.aclose()
        await closed.aclose()
    warnings = [r for r in caplog.records if r.name == "specway.ratelimit" and r.levelno == logging.WARNING]
    assert len(warnings) == 2  # once per limiter and outage, not per request
    assert sorted(r.getMessage().rsplit(" ", 1)[1] for r in warnings) == ["closed", "open"]


async def test_recovers_when_redis_returns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="specway.ratelimit")
    port = _free_port()
    limiter = RedisLimiter(f"redis://127.0.0.1:{port}/0", on_error="closed")
    down = Verdict(False, 1000, 0, 1.0, 1.0)  # a real refusal is impossible here: 1000 a minute, a few hits
    try:
        assert await limiter.hit("k", 1000) == down
        with _redis_server(port, tmp_path):
            assert (await limiter.hit("k", 1000)).remaining == 999
            await limiter.ping()
        assert await limiter.hit("k", 1000) == down  # pooled connections now point at a dead server
        with _redis_server(port, tmp_path):
            assert (await limiter.hit("k", 1000)).remaining == 999  # a new, empty server
    finally:
        await limiter.aclose()
    said = [r.getMessage().split(" (")[0] for r in caplog.records if r.name == "specway.ratelimit"]
    assert said == ["rate limiter: Redis unreachable", "rate limiter: Redis is reachable again"] * 2


# headers


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.12, "120ms"), (0.001, "1ms"), (1, "1s"), (1.5, "1.5s"), (59.999, "59.999s"), (60, "1m0s")]
    + [(360, "6m0s"), (61.25, "1m1.25s"), (3600, "1h0m0s"), (3725, "1h2m5s")],
)
def test_headers_use_openai_durations(seconds: float, text: str) -> None:
    verdict = Verdict(True, 1000, 250, seconds, None)
    assert headers("tokens", verdict) == {
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "250",
        "x-ratelimit-reset-tokens": text,
    }


def test_headers_name_the_kind() -> None:
    assert set(headers("requests", Verdict(False, 60, 0, 60.0, 1.0))) == {
        "x-ratelimit-limit-requests",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
    }


@pytest.mark.parametrize(
    ("retry_after", "seconds", "ms"),
    [(0, "1", "1"), (0.0004, "1", "1"), (0.25, "1", "250"), (1.0, "1", "1000"), (1.001, "2", "1001")]
    + [(0.57, "1", "570"), (59.5, "60", "59500"), (60, "60", "60000"), (3600, "60", "60000")],
)
def test_retry_headers_stay_within_bounds(retry_after: float, seconds: str, ms: str) -> None:
    assert retry_headers(retry_after) == {"Retry-After": seconds, "retry-after-ms": ms}
    assert 1 <= int(seconds) <= 60 and math.ceil(int(ms) / 1000) <= int(seconds)
