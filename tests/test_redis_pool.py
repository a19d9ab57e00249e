"""The Redis pool under load: a burst queues for connections instead of being taken for an outage, so a key's
requests-per-minute limit holds exactly; a pool that stays full past its wait answers 503, never fails open; an
outage is logged once and costs one call to Redis at a time."""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml

from handlers.errors import ApiError
from handlers.metering.ratelimit import RedisLimiter, Verdict
from tests.conftest import free_port, spawn, stop, unavailable
from tests.test_metering import redis_available

REDIS_URL = "redis://127.0.0.1:6379/0"
BURST, ROUNDS = 1000, 3  # connections at once, and requests on each
RPM = 3  # one request frees every 20 s: a burst that ends sooner than that lets exactly RPM through


@pytest.fixture(autouse=True)
def _redis_up() -> None:
    if not redis_available():
        unavailable("Redis is not reachable at 127.0.0.1:6379")


def _gateway(tmp_path: Path, redis_url: str) -> Iterator[tuple[int, str, Path]]:
    config = tmp_path / "specway.yaml"
    config.write_text(yaml.safe_dump({
        "server": {"log_level": "info"},
        "store": {"url": f"sqlite:///{tmp_path / 's.db'}"},
        "limits": {"redis_url": redis_url},
    }))
    port, log = free_port(), tmp_path / "serve.log"
    proc, admin = spawn(config, port, log)
    try:
        yield port, admin, log
    finally:
        stop(proc)


def _key(port: int, admin: str, rpm: int) -> str:
    url, h = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {admin}"}
    ws = httpx.post(f"{url}/v1/workspaces", json={"name": "burst", "credit": "0"}, headers=h).json()
    r = httpx.post(f"{url}/v1/keys", json={"name": "burst", "workspace_id": ws["id"], "limits": {"rpm": rpm}}, headers=h)
    assert r.status_code == 201, r.text
    return str(r.json()["secret"])


async def _burst(port: int, key: str, n: int, rounds: int) -> list[int | str]:
    """n connections opened first, then on each, `rounds` requests one after the other (keep-alive): n requests
    at once, all the time, as a load generator makes them. The status of each answer (or what went wrong)."""
    body = json.dumps({"model": "specway/echo", "messages": [{"role": "user", "content": "hi"}],
                       "stream": True}).encode()
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {key}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    connections = [await asyncio.open_connection("127.0.0.1", port) for _ in range(n)]

    async def answers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> list[int | str]:
        statuses: list[int | str] = []
        try:
            for _ in range(rounds):
                writer.write(request)
                head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 120)).lower()
                statuses.append(int(head.split(b" ", 2)[1]))
                if b"content-length:" in head:
                    await reader.readexactly(int(head.split(b"content-length:")[1].split(b"\r\n")[0]))
                    continue
                while size := int((await reader.readuntil(b"\r\n")).strip(), 16):  # chunked, to the last chunk
                    await reader.readexactly(size + 2)
                await reader.readexactly(2)
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            statuses.append(type(exc).__name__)
        finally:
            writer.close()
        return statuses

    return [status for each in await asyncio.gather(*(answers(r, w) for r, w in connections)) for status in each]


def _exactly_rpm_through(tmp_path: Path, redis_url: str) -> None:
    for port, admin, log in _gateway(tmp_path, redis_url):
        key = _key(port, admin, RPM)
        started = time.monotonic()
        statuses = asyncio.run(_burst(port, key, BURST, ROUNDS))
        took = time.monotonic() - started
        refilled = int(took * RPM / 60)  # what the bucket got back while the burst ran: none within 60 / RPM s
        counts = collections.Counter(statuses)
        assert set(counts) <= {200, 429} and sum(counts.values()) == BURST * ROUNDS, counts
        assert RPM <= counts[200] <= RPM + refilled, (counts, f"{took:.1f} s")
        said = log.read_text()
        assert "unreachable" not in said and "failing open" not in said, said[-2000:]


def test_a_thousand_at_once_let_exactly_the_rpm_through(tmp_path: Path) -> None:
    _exactly_rpm_through(tmp_path, REDIS_URL)


def test_a_small_pool_queues_a_burst_instead_of_failing_open(tmp_path: Path) -> None:
    """Two Redis connections for a thousand requests at once: every call waits its turn, none is taken for an
    outage."""
    _exactly_rpm_through(tmp_path, REDIS_URL + "?max_connections=2")


async def test_a_pool_full_past_its_wait_answers_503_and_logs_no_outage(caplog: pytest.LogCaptureFixture) -> None:
    limiter = RedisLimiter(REDIS_URL + "?max_connections=1&timeout=0.2", prefix=f"specway:test:{time.time_ns()}:")
    try:
        holder = asyncio.ensure_future(limiter._redis.blpop(["specway:test:never"], timeout=1))  # the one connection
        await asyncio.sleep(0.1)
        with pytest.raises(ApiError) as refused:
            await limiter.hit("k", 60)
        assert refused.value.status == 503 and refused.value.code == "overloaded"
        assert refused.value.headers["Retry-After"] == "1"
        await limiter.refund("k", 60, 1)  # best effort: no exception, nothing waits for it
        await holder
        assert (await limiter.hit("k", 60)).remaining == 59  # the refused hit took nothing
    finally:
        await limiter.aclose()
    assert not [r for r in caplog.records if r.name == "specway.ratelimit" and r.levelno >= logging.WARNING]


@contextmanager
def _hangs_up() -> Iterator[tuple[int, list[int]]]:
    """A port that accepts each connection and closes it at once (a Redis that is away); its count of accepts."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    accepted, done = [0], threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            accepted[0] += 1
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], accepted
    finally:
        done.set()
        thread.join(5)
        listener.close()


async def test_an_outage_is_said_once_and_probed_by_one_call_at_a_time(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="specway.ratelimit")
    with _hangs_up() as (port, accepted):
        limiter = RedisLimiter(f"redis://127.0.0.1:{port}/0", on_error="open")
        try:
            assert await limiter.hit("k", 60) == Verdict(True, 60, 59, 0.0, None)  # the outage begins
            first = accepted[0]
            verdicts = await asyncio.gather(*(limiter.hit("k", 60) for _ in range(200)))
            assert set(verdicts) == {Verdict(True, 60, 59, 0.0, None)}
        finally:
            await limiter.aclose()
    assert 1 <= first and accepted[0] - first <= first  # one probe (as many tries as the first call), not 200
    said = [r.getMessage() for r in caplog.records if r.name == "specway.ratelimit"]
    assert len(said) == 1 and said[0].startswith("rate limiter: Redis unreachable") and said[0].endswith("failing open")
