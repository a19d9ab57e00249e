"""Running it: metrics across workers, one JSON log line per request, and a graceful shutdown that loses nothing."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any, get_args

import httpx
import pytest
import yaml

from generated.config import UpstreamSettings
from handlers.store import open_store
from tests.conftest import free_port, serve, spawn, stop
from tests.fake_upstream import FakeUpstream

USER = [{"role": "user", "content": "a secret prompt"}]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


def write_config(tmp_path: Path, fake: FakeUpstream, **server: Any) -> Path:
    path = tmp_path / "specway.yaml"
    path.write_text(yaml.safe_dump({
        "server": {"log_level": "info", **server},
        "store": {"url": f"sqlite:///{tmp_path / 's.db'}"},
        "upstreams": {"up": {"kind": "openai", "base_url": fake.url}},
        "models": [{"id": "acme/m", "upstream": "up", "name": "m-up", "price": {"input": "1", "output": "2"}}],
    }))
    return path


def fund(url: str, key: str, amount: str = "100") -> None:
    """Credit for the first key's workspace (the first key has every scope, admin included)."""
    h = {"Authorization": f"Bearer {key}"}
    ws = httpx.get(f"{url}/v1/key", headers=h).json()["workspace"]["id"]
    assert httpx.post(f"{url}/v1/workspaces/{ws}/credit", json={"amount": amount}, headers=h).status_code == 200


def scrape(url: str, name: str, **labels: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{name}\{{(.*)\}} (\S+)$", line)
        if match and all(f'{k}="{v}"' in match[1] for k, v in labels.items()):
            total += float(match[2])
    return total


def test_metrics_count_a_known_load_with_two_workers(fake: FakeUpstream, tmp_path: Path) -> None:
    fake.reset()
    proc, key = spawn(write_config(tmp_path, fake), free_port_holder := free_port(), tmp_path / "serve.log",
                      "--workers", "2")
    url = f"http://127.0.0.1:{free_port_holder}"
    try:
        fund(url, key)
        async def load() -> list[httpx.Response]:
            async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
                return list(await asyncio.gather(*(
                    c.post(f"{url}/v1/chat/completions", json={"messages": USER, "model": "acme/m"}) for _ in range(20))))

        responses = asyncio.run(load())
        assert [r.status_code for r in responses] == [200] * 20
        for _ in range(6):  # whichever worker answers, the count is the whole process group's
            assert scrape(url, "specway_requests_total", route="/v1/chat/completions", status="200") == 20
            assert scrape(url, "specway_inference_requests_total", format="chat", model="acme/m", outcome="ok") == 20
        usage = [r.json()["usage"] for r in responses]
        assert scrape(url, "specway_tokens_total", model="acme/m", kind="input") == sum(u["prompt_tokens"] for u in usage)
        assert scrape(url, "specway_tokens_total", model="acme/m", kind="output") == sum(
            u["completion_tokens"] for u in usage)
        assert scrape(url, "specway_gateway_overhead_seconds_count", format="chat") == 20
    finally:
        stop(proc)


def test_one_json_log_line_per_request_without_secrets_or_text(fake: FakeUpstream, tmp_path: Path) -> None:
    fake.reset()
    port = free_port()
    log = tmp_path / "serve.log"
    proc, key = spawn(write_config(tmp_path, fake), port, log)
    try:
        fund(f"http://127.0.0.1:{port}", key)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={"messages": USER, "model": "acme/m"},
                       headers={"Authorization": f"Bearer {key}", "x-request-id": "req-42"})
        assert r.status_code == 200
    finally:
        stop(proc)
    text = log.read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    request = [line for line in lines if line.get("request_id") == "req-42"]
    assert len(request) == 1
    entry = request[0]
    assert entry["status"] == 200 and entry["route"] == "/v1/chat/completions" and entry["model"] == "acme/m"
    assert entry["decision_id"] == r.headers["x-specway-decision-id"] and entry["key_id"].startswith("key_")
    assert entry["input_tokens"] > 0 and entry["latency_ms"] > 0
    assert key not in text and "a secret prompt" not in text and "Hello from fake" not in text


def test_sigterm_lets_twenty_streams_finish_and_loses_no_record(fake: FakeUpstream, tmp_path: Path) -> None:
    fake.reset()
    for _ in range(20):
        fake.script(text=" ".join(["tok"] * 20), chunk_delay=0.1)  # each stream lasts about two seconds
    port = free_port()
    config = write_config(tmp_path, fake, drain_seconds=20)
    proc, key = spawn(config, port, tmp_path / "serve.log")
    url = f"http://127.0.0.1:{port}"
    fund(url, key)
    body = {"messages": USER, "model": "acme/m", "stream": True, "stream_options": {"include_usage": True}}

    async def streams() -> list[tuple[str, bytes]]:
        started = asyncio.Event()
        count = 0

        async def one(c: httpx.AsyncClient) -> tuple[str, bytes]:
            nonlocal count
            async with c.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
                raw = r.aiter_raw()
                chunks = [await anext(raw)]
                count += 1
                if count == 20:
                    started.set()
                chunks += [chunk async for chunk in raw]
                return r.headers["x-specway-decision-id"], b"".join(chunks)

        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
            tasks = [asyncio.create_task(one(c)) for _ in range(20)]
            await asyncio.wait_for(started.wait(), 30)
            proc.send_signal(signal.SIGTERM)  # every stream has begun; none has finished
            return list(await asyncio.gather(*tasks))

    try:
        results = asyncio.run(streams())
        assert proc.wait(30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has shut down
        assert "Application shutdown complete" in (tmp_path / "serve.log").read_text()
    finally:
        stop(proc)
    assert all(body.rstrip().endswith(b"data: [DONE]") for _, body in results)

    async def records() -> tuple[list[dict[str, Any] | None], Decimal]:
        store = open_store(f"sqlite:///{tmp_path / 's.db'}")
        await store.open()
        try:
            found = [await store.get_decision(d) for d, _ in results]
            keys = await store.list_keys()
            return found, sum((k.spend_total for k in keys), Decimal(0))
        finally:
            await store.close()

    found, spend = asyncio.run(records())
    assert all(r is not None and r["outcome"] == "ok" for r in found)
    assert spend == sum(Decimal(r["cost"]) for r in found if r) > 0


@pytest.mark.parametrize(("config", "says"), [
    ({"store": {"url": "postgresql://u:hunter2@127.0.0.1:{port}/x"}}, "cannot open the store at postgresql://u:***@"),
    ({"limits": {"redis_url": "redis://127.0.0.1:{port}/0"}}, "cannot reach Redis at redis://127.0.0.1:"),
])
def test_startup_fails_fast_and_clearly_without_its_dependencies(tmp_path: Path, config: dict[str, Any],
                                                                 says: str) -> None:
    text = yaml.safe_dump(config).replace("{port}", str(free_port()))  # a closed port
    path = tmp_path / "specway.yaml"
    path.write_text(text if "store" in config else text + f"store: {{url: 'sqlite:///{tmp_path / 's.db'}'}}\n")
    run = subprocess.run([sys.executable, "-m", "handlers.cli", "--config", str(path), "serve", "--port",
                          str(free_port())], capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 2 and says in run.stderr, run.stderr
    assert "hunter2" not in run.stderr and "Traceback" not in run.stderr


@contextmanager
def private_redis() -> Iterator[int]:
    """A redis-server of this test's own, so it can be stopped mid-test."""
    port = free_port()
    subprocess.run(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                    "--daemonize", "yes"], check=True, capture_output=True)
    try:
        yield port
    finally:
        subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"], capture_output=True, check=False)


@pytest.mark.parametrize(("mode", "status"), [("open", 200), ("closed", 503)])
def test_readiness_while_redis_is_away_follows_the_failure_mode(tmp_path: Path, mode: str, status: int) -> None:
    with private_redis() as port:
        config = {"limits": {"redis_url": f"redis://127.0.0.1:{port}/0", "on_redis_error": mode}}
        with serve(config, tmp_path) as g:
            assert httpx.get(f"{g.url}/readyz").json()["checks"]["limits"] == "ok"
            subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"], capture_output=True, check=False)
            r = httpx.get(f"{g.url}/readyz")
            assert r.status_code == status, r.text
            if mode == "open":
                assert r.json() == {"status": "degraded", "checks": {"store": "ok", "limits": "unreachable, failing open"}}
            assert httpx.get(f"{g.url}/healthz").status_code == 200


def test_an_unset_upstream_key_variable_stops_startup_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "specway.yaml"
    path.write_text(yaml.safe_dump({
        "store": {"url": f"sqlite:///{tmp_path / 's.db'}"},
        "upstreams": {"up": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "SPECWAY_NOT_SET"}},
        "models": [{"id": "m", "upstream": "up", "name": "m"}]}))
    run = subprocess.run([sys.executable, "-m", "handlers.cli", "--config", str(path), "serve", "--port",
                          str(free_port())], capture_output=True, text=True, timeout=60, check=False,
                         env={k: v for k, v in os.environ.items() if k != "SPECWAY_NOT_SET"})
    assert run.returncode == 2 and "SPECWAY_NOT_SET is not set" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("stream", [False, True])
def test_prompt_and_answer_are_logged_only_when_asked(fake: FakeUpstream, tmp_path: Path, stream: bool) -> None:
    fake.reset()
    port = free_port()
    log = tmp_path / "serve.log"
    proc, key = spawn(write_config(tmp_path, fake, log_content=True), port, log)
    try:
        fund(f"http://127.0.0.1:{port}", key)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                       json={"messages": USER, "model": "acme/m", "stream": stream},
                       headers={"Authorization": f"Bearer {key}", "x-request-id": "req-text"})
        assert r.status_code == 200
    finally:
        stop(proc)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    entry = next(line for line in lines if line.get("request_id") == "req-text")
    assert (entry["prompt"], entry["answer"]) == ("a secret prompt", "Hello from fake")
    assert key not in log.read_text()


def test_the_named_metrics_count_fallbacks_cooldowns_refusals_cost_and_timings(fake: FakeUpstream,
                                                                               tmp_path: Path) -> None:
    """The README's metrics beyond requests and tokens: each moves by what a known load did (read as deltas, since
    every in-process gateway shares one registry)."""
    fake.reset()
    closed = free_port()  # nothing listens there: every connection to "down" is refused
    config = {
        "upstreams": {"down": {"kind": "openai", "base_url": f"http://127.0.0.1:{closed}/v1"},
                      "up": {"kind": "openai", "base_url": fake.url}},
        "models": [{"id": "acme/gone", "upstream": "down", "name": "gone-up"},
                   {"id": "acme/metered", "upstream": "up", "name": "m-up", "price": {"input": "1", "output": "2"}}],
        "policies": {"default": {"default_model": "acme/gone", "fallbacks": {"acme/gone": ["acme/metered"]}}},
        "cooldown": {"failures": 1, "window_seconds": 60, "seconds": 60},
    }
    with serve(config, tmp_path) as g:
        def now() -> dict[str, float]:
            return {
                "upstream": scrape(g.url, "specway_upstream_seconds_count", upstream="up", model="acme/metered"),
                "first_byte": scrape(g.url, "specway_stream_first_byte_seconds_count", format="chat",
                                     model="acme/metered"),
                "cost": scrape(g.url, "specway_cost_total", model="acme/metered"),
                "fallbacks": scrape(g.url, "specway_fallbacks_total", upstream="down"),
                "cooldowns": scrape(g.url, "specway_cooldowns_total", upstream="down"),
                "refusals": scrape(g.url, "specway_refusals_total", reason="credit"),
            }

        before = now()
        funded = g.create_key(workspace_id=g.run(g.gateway.store.create_workspace("paying", Decimal(100))).id)
        broke = g.create_key(workspace_id=g.run(g.gateway.store.create_workspace("broke", Decimal(0))).id)
        costs = []
        with httpx.Client(base_url=g.url, headers={"Authorization": f"Bearer {funded}"}, timeout=30) as c:
            first = c.post("/v1/chat/completions", json={"messages": USER})  # down refuses: fallback, cooldown
            assert first.status_code == 200 and first.headers["x-specway-model"] == "acme/metered", first.text
            streamed = c.post("/v1/chat/completions", json={"messages": USER, "model": "acme/metered", "stream": True})
            assert streamed.status_code == 200
            for r in (first, streamed):
                deadline = time.monotonic() + 30  # a streamed request's record is written once it ended
                while not (record := c.get(f"/v1/route/explain/{r.headers['x-specway-decision-id']}")).is_success:
                    assert time.monotonic() < deadline, record.text
                    time.sleep(0.05)
                costs.append(Decimal(record.json()["cost"]))
        refused = httpx.post(f"{g.url}/v1/chat/completions", json={"messages": USER, "model": "acme/metered"},
                             headers={"Authorization": f"Bearer {broke}"})
        assert refused.status_code == 402, refused.text
        after = now()
    moved = {name: round(after[name] - before[name], 9) for name in after}
    assert moved == {"upstream": 2, "first_byte": 1, "cost": float(sum(costs)), "fallbacks": 1, "cooldowns": 1,
                     "refusals": 1}, moved
    assert sum(costs) > 0


def test_a_bad_configuration_file_names_the_file_the_path_and_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump({"store": {"url": f"sqlite:///{tmp_path / 's.db'}"},
                                    "upstreams": {"up": {"kind": "carrier-pigeon", "base_url": "http://x"}}}))
    run = subprocess.run([sys.executable, "-m", "handlers.cli", "--config", str(path), "serve", "--port",
                          str(free_port())], capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 2, run.stderr
    kinds = [repr(kind) for kind in get_args(UpstreamSettings.model_fields["kind"].annotation)]
    said = f"{', '.join(kinds[:-1])} or {kinds[-1]}"  # pydantic's words for the spec's enum of kinds
    assert f"{path}: upstreams.up.kind: Input should be {said}" in run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "s.db").exists()


def test_the_first_key_is_printed_once_alone_on_stdout(fake: FakeUpstream, tmp_path: Path) -> None:
    config = write_config(tmp_path, fake)
    keys = []
    for i in range(2):
        proc, key = spawn(config, free_port(), tmp_path / f"serve{i}.log")
        stop(proc)
        keys.append(key)
    assert re.fullmatch(r"sk-sw-\S+", keys[0]), keys[0]  # alone on its line; the words around it go to stderr
    assert "it is shown only this once" in (tmp_path / "serve0.log").read_text()
    assert keys[1] == "" and keys[0] not in (tmp_path / "serve1.log").read_text()  # a used store: nothing printed


def test_sigterm_cuts_a_stream_off_at_drain_seconds(fake: FakeUpstream, tmp_path: Path) -> None:
    """A stream that would outlast server.drain_seconds is cut there: the process does not wait for it."""
    fake.reset()
    fake.script(text=" ".join(["tok"] * 60), chunk_delay=0.5)  # about 30 s of stream
    port = free_port()
    proc, key = spawn(write_config(tmp_path, fake, drain_seconds=2), port, tmp_path / "serve.log")
    try:
        fund(f"http://127.0.0.1:{port}", key)
        body = {"messages": USER, "model": "acme/m", "stream": True}
        got = b""
        with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=60,
                          headers={"Authorization": f"Bearer {key}"}) as r:
            raw = r.iter_raw()
            got += next(raw)
            proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            try:
                for chunk in raw:
                    got += chunk
            except httpx.HTTPError:
                pass  # the connection closed mid-stream: that is the cut
        proc.wait(30)
        took = time.monotonic() - signalled
    finally:
        stop(proc)
    assert b"[DONE]" not in got and b"tok" in got  # the stream had begun, and did not finish
    assert 1.5 <= took < 15, took  # it was given drain_seconds (2), then cut: not the 30 s the stream needed
