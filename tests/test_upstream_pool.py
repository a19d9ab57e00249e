"""The bound on calls open to one upstream (upstreams.<name>.pool): a call beyond it waits its turn, up to
wait_seconds, outside the upstream's timeouts; running out is 503 upstream_busy (or the next candidate on another
upstream) and never counts toward the upstream's cooldown. Every way a call ends gives its connection back."""

from __future__ import annotations

import asyncio
import resource
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
import yaml

from handlers.inference.upstreams import OpenAIUpstream, Timeouts, UpstreamError
from handlers.inference.upstreams.base import Pool
from tests.conftest import Live, free_port, serve, spawn, stop, unavailable
from tests.fake_upstream import FakeUpstream
from tests.upstream_support import HELLO, answer, failure

USER = [{"role": "user", "content": "hi"}]
ONE = Pool(max_connections=1, wait_seconds=0)  # a second call at once is busy without waiting


@pytest.fixture(scope="module")
def fakes() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    with FakeUpstream() as a, FakeUpstream() as b:
        yield a, b


@pytest.fixture
def fake(fakes: tuple[FakeUpstream, FakeUpstream]) -> Iterator[FakeUpstream]:
    for f in fakes:
        f.reset()
    yield fakes[0]
    for f in fakes:
        f.release()


async def until(condition: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition never became true"
        await asyncio.sleep(0.02)


# --- The upstream's own bound -----------------------------------------------------------------------------------------


async def test_a_call_beyond_the_pool_waits_its_turn(fake: FakeUpstream) -> None:
    upstream = OpenAIUpstream("up", base_url=fake.url, pool=Pool(max_connections=1, wait_seconds=60))
    try:
        gate = fake.hold()
        first = asyncio.ensure_future(upstream.complete(HELLO, "m"))
        await until(lambda: len(fake.requests) == 1)
        second = asyncio.ensure_future(upstream.complete(HELLO, "m"))
        await asyncio.sleep(0.3)  # time enough for a second connection, had the bound let it through
        assert len(fake.requests) == 1 and not second.done()
        gate.set()
        assert [r.text() for r in await asyncio.gather(first, second)] == ["Hello from fake"] * 2
    finally:
        await upstream.aclose()


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_full_pool_is_busy_not_the_upstreams_failure(fake: FakeUpstream, streaming: bool) -> None:
    upstream = OpenAIUpstream("up", base_url=fake.url, pool=Pool(max_connections=1, wait_seconds=0.2))
    try:
        fake.hold()
        first = asyncio.ensure_future(answer(upstream, streaming))
        await until(lambda: len(fake.requests) == 1)
        error = await failure(answer(upstream, streaming))
        assert error.kind == "busy" and error.status is None and error.retry_after == 1.0
        assert error.message == "upstream up had all 1 of its connections in use for 0.2 s (pool.max_connections, " \
                                "pool.wait_seconds)"
        assert error.falls_back and error.retryable and not error.trips_cooldown and not error.caller_fault
        assert len(fake.requests) == 1  # it never reached the upstream
        fake.release()
        assert (await first).text() == "Hello from fake"
    finally:
        await upstream.aclose()


def test_which_failures_count_toward_which_breaker() -> None:
    def err(kind: Any, status: int | None = None) -> UpstreamError:
        return UpstreamError(kind, "x", status=status)

    whole = [err("connect"), err("status", 401)]
    deployment = [err("timeout"), err("status", 429), err("status", 500), err("status", 529), err("status", 403)]
    spared = [err("busy"), err("protocol"), err("status", 400)]
    assert [e.breaker for e in whole + deployment + spared] == ["upstream"] * 2 + ["deployment"] * 5 + [None] * 3
    assert all(e.trips_cooldown for e in whole + deployment) and not any(e.trips_cooldown for e in spared)
    assert all(e.falls_back for e in whole + deployment + spared[:-1]) and not spared[-1].falls_back
    waits = [UpstreamError("status", "x", status=s, retry_after=2.0).wait for s in (429, 529, 503, 401, 400)]
    assert waits == [2.0, 2.0, 2.0, None, None]  # a wait cools at once only what the upstream is busy with


async def _close_after_first_event(upstream: OpenAIUpstream) -> None:
    events = upstream.stream(HELLO, "m")
    await anext(events)
    await events.aclose()  # type: ignore[attr-defined]


async def _cancelled(upstream: OpenAIUpstream, fake: FakeUpstream, streaming: bool) -> None:
    gate = fake.hold()
    before = len(fake.requests)
    task = asyncio.ensure_future(answer(upstream, streaming))
    await until(lambda: len(fake.requests) > before)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    gate.set()
    fake.release()


async def test_every_way_a_call_ends_gives_its_connection_back(fake: FakeUpstream) -> None:
    """With one connection and no wait, a slot kept by any ending would make the next call busy at once."""
    upstream = OpenAIUpstream("up", base_url=fake.url, pool=ONE, timeouts=Timeouts(read=5, total=0.3))
    endings: list[Callable[[], Awaitable[Any]]] = []
    for streaming in (False, True):
        for fields in ({"status": 500}, {"status": 401}, {"status": 400}, {"malformed": True}, {"delay": 1.0}):
            endings.append(lambda f=fields, s=streaming: _fail(upstream, fake, s, f))
        endings.append(lambda s=streaming: _cancelled(upstream, fake, s))
        endings.append(lambda s=streaming: answer(upstream, s))
    endings.append(lambda: _fail(upstream, fake, True, {"cut_after": 2}))
    endings.append(lambda: _close_after_first_event(upstream))
    try:
        for ending in endings:
            await ending()  # each would be busy at once had one before it kept its slot
        assert (await answer(upstream, True)).text() == "Hello from fake"
    finally:
        await upstream.aclose()


async def _fail(upstream: OpenAIUpstream, fake: FakeUpstream, streaming: bool, fields: dict[str, Any]) -> None:
    fake.script(**fields)
    assert (await failure(answer(upstream, streaming))).kind != "busy"


# --- Through the gateway ----------------------------------------------------------------------------------------------


def pool_config(a: FakeUpstream, b: FakeUpstream) -> dict[str, Any]:
    """`up` has one connection and waits 0.2 s for it; acme/a falls back to acme/a2 (also on up), then acme/b."""
    return {
        "upstreams": {"up": {"kind": "openai", "base_url": a.url, "pool": {"max_connections": 1, "wait_seconds": 0.2}},
                      "spare": {"kind": "openai", "base_url": b.url}},
        "models": [{"id": "acme/a", "upstream": "up", "name": "a"}, {"id": "acme/a2", "upstream": "up", "name": "a2"},
                   {"id": "acme/b", "upstream": "spare", "name": "b"}],
        "policies": {"default": {"default_model": "acme/a"},
                     "fallback": {"default_model": "acme/a", "fallbacks": {"acme/a": ["acme/a2", "acme/b"]}}},
    }


@pytest.fixture
def gw(fakes: tuple[FakeUpstream, FakeUpstream], fake: FakeUpstream, tmp_path: Path) -> Iterator[Live]:
    with serve(pool_config(*fakes), tmp_path) as g:
        yield g


def post(gw: Live, key: str, stream: bool = False) -> httpx.Response:
    return httpx.post(f"{gw.url}/v1/chat/completions", json={"messages": USER, "stream": stream},
                      headers={"Authorization": f"Bearer {key}"}, timeout=60)


def record(gw: Live, response: httpx.Response) -> dict[str, Any]:
    decision = response.headers["x-specway-decision-id"]
    return dict(httpx.get(f"{gw.url}/v1/route/explain/{decision}", headers=gw.headers, timeout=10).json())


def occupied(gw: Live, fake: FakeUpstream, pool: ThreadPoolExecutor) -> Future[httpx.Response]:
    """A request that holds up's one connection (held at the fake) until fake.release()."""
    fake.hold()
    held = pool.submit(post, gw, gw.key)
    deadline = time.monotonic() + 30
    while len(fake.requests) < 1:
        assert time.monotonic() < deadline and not held.done(), "the first request never reached the upstream"
        time.sleep(0.02)
    return held


@pytest.mark.parametrize("stream", [False, True])
def test_a_full_pool_is_503_upstream_busy_and_never_a_cooldown(gw: Live, fake: FakeUpstream, stream: bool) -> None:
    with ThreadPoolExecutor(1) as pool:
        held = occupied(gw, fake, pool)
        for _ in range(4):  # more than the cooldown's threshold of 3 failures
            r = post(gw, gw.key, stream)
            assert r.status_code == 503, r.text
            assert (r.json()["error"]["code"], r.headers["retry-after"]) == ("upstream_busy", "1")
            attempts = record(gw, r)["attempts"]
            assert [(a["upstream"], a["status"]) for a in attempts] == [("up", None)]
            assert attempts[0]["error"].startswith("busy: upstream up had all 1 of its connections in use")
        fake.release()
        assert held.result(30).status_code == 200
    assert all(gw.gateway.cooldowns.blocking("up", f"up/{name}") is None for name in ("a", "a2"))
    r = post(gw, gw.key, stream)
    assert r.status_code == 200 and record(gw, r)["candidates"][0]["verdict"] == "chosen"


def test_a_full_pool_moves_on_to_a_candidate_on_another_upstream(gw: Live, fake: FakeUpstream) -> None:
    key = gw.create_key(policy="fallback")
    with ThreadPoolExecutor(1) as pool:
        held = occupied(gw, fake, pool)
        r = post(gw, key)
        assert r.status_code == 200 and r.headers["x-specway-model"] == "acme/b"
        attempts = record(gw, r)["attempts"]
        assert [(a["model"], a["status"]) for a in attempts] == [("acme/a", None), ("acme/a2", None), ("acme/b", 200)]
        assert attempts[1]["error"] == "busy: upstream up had no free connection a moment ago; not waited on again " \
                                       "for this request"
        fake.release()
        assert held.result(30).status_code == 200
    assert all(gw.gateway.cooldowns.blocking("up", f"up/{name}") is None for name in ("a", "a2"))


# --- A thousand streams on one worker ---------------------------------------------------------------------------------

STREAMS = 1000
POOL = 512  # the default pool.max_connections
CONNECT = 3.0  # the upstream's connect timeout: short, yet above the event loop's lag with a thousand streams open


def open_files(needed: int) -> None:
    """Raise this process's open-file limit (which `specway serve` inherits) to fit `needed`, or unavailable()."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            unavailable(f"the open-file limit is {hard}; {STREAMS} streams need about {needed}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


async def streams(url: str, key: str, fake: FakeUpstream) -> list[tuple[int, bytes]]:
    """STREAMS streams at once. The fake holds them until the pool is full, and then for longer than the upstream's
    connect timeout, which used to bound the wait for a connection: the waiting ones must still be served."""
    body = {"messages": USER, "stream": True, "stream_options": {"include_usage": True}}
    headers = {"Authorization": f"Bearer {key}"}
    timeout = aiohttp.ClientTimeout(total=300)

    async def one(session: aiohttp.ClientSession) -> tuple[int, bytes]:
        async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as r:
            return r.status, await r.read()

    gate = fake.hold()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        tasks = [asyncio.ensure_future(one(session)) for _ in range(STREAMS)]
        try:
            await until(lambda: len(fake.requests) >= POOL or any(t.done() for t in tasks), 120)
            await asyncio.sleep(CONNECT + 1)  # past the connect timeout, with every connection of the pool in use
            assert len(fake.requests) == POOL, "the pool let more calls through than max_connections"
        finally:
            gate.set()
        return list(await asyncio.gather(*tasks))


def test_a_thousand_streams_on_one_worker_all_complete(fakes: tuple[FakeUpstream, FakeUpstream],
                                                       tmp_path: Path) -> None:
    fake = fakes[0]
    fake.reset()
    open_files(3 * STREAMS + 256)
    config = {
        "store": {"url": f"sqlite:///{tmp_path / 'specway.db'}"},
        "upstreams": {"up": {"kind": "openai", "base_url": fake.url, "timeouts": {"connect": CONNECT}}},
        "models": [{"id": "acme/free", "upstream": "up", "name": "m"}],
        "policies": {"default": {"default_model": "acme/free"}},
    }
    path = tmp_path / "specway.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    proc, key = spawn(path, port, tmp_path / "serve.log", "--workers", "1")
    try:
        answers = asyncio.run(streams(f"http://127.0.0.1:{port}", key, fake))
    finally:
        fake.release()
        stop(proc)
    assert [(status, body[:300]) for status, body in answers if status != 200][:3] == []
    for _, body in answers:
        assert body.endswith(b"data: [DONE]\n\n") and b'"error"' not in body and b'"content":"fake"' in body
    assert len(fake.requests) == STREAMS
    assert len({r.peer for r in fake.requests}) <= POOL  # connections were reused, never more than the pool
