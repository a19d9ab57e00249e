"""Reloading the configuration without a restart: POST /v1/admin/reload and SIGHUP swap the catalog, policies and
upstreams for new requests; what is in flight finishes on what it started with; a bad file changes nothing."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import REGISTRY

from generated.scopes import SCOPES
from handlers import reloading
from tests.conftest import Live, free_port, serve, spawn, stop
from tests.fake_dialects import Reply
from tests.fake_upstream import FakeUpstream


@pytest.fixture(scope="module")
def fakes() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    with FakeUpstream() as a, FakeUpstream() as b:
        yield a, b


def settings(a: FakeUpstream, b: FakeUpstream, db: Path, *, models: tuple[str, ...] = ("one",),
             on: str = "a", **extra: Any) -> dict[str, Any]:
    """Two upstreams; `models` served by upstream `on`, each under its own name."""
    return {
        "store": {"url": f"sqlite:///{db}"},
        "upstreams": {"a": {"kind": "openai", "base_url": a.url}, "b": {"kind": "openai", "base_url": b.url}},
        "models": [{"id": f"test/{m}", "upstream": on, "name": m} for m in models],
        **extra,
    }


def write(path: Path, data: dict[str, Any] | str) -> None:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))


@pytest.fixture
def setup(fakes: tuple[FakeUpstream, FakeUpstream], tmp_path: Path) -> Iterator[tuple[Live, Path]]:
    a, b = fakes
    a.reset(), b.reset()
    path = tmp_path / "specway.yaml"
    write(path, settings(a, b, tmp_path / "specway.db"))
    with serve(None, tmp_path, path=path) as gw:
        yield gw, path


def reload(gw: Live, key: str | None = None) -> httpx.Response:
    return httpx.post(f"{gw.url}/v1/admin/reload", headers={"Authorization": f"Bearer {key or gw.key}"}, timeout=10)


def chat(gw: Live, model: str, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}
    return httpx.post(f"{gw.url}/v1/chat/completions", headers=gw.headers, json=body, timeout=30)


def explain(gw: Live, answer_id: str) -> dict[str, Any]:
    decision = answer_id.removeprefix("chatcmpl-")
    for _ in range(100):  # the writer stores records within a flush; explain reads pending ones too
        r = httpx.get(f"{gw.url}/v1/route/explain/{decision}", headers=gw.headers, timeout=10)
        if r.status_code == 200:
            return dict(r.json())
        time.sleep(0.05)
    raise AssertionError(f"no record for {answer_id}")


def test_a_reload_swaps_the_catalog_and_records_name_their_revision(
        setup: tuple[Live, Path], fakes: tuple[FakeUpstream, FakeUpstream], tmp_path: Path) -> None:
    gw, path = setup
    a, b = fakes
    first = chat(gw, "test/one")
    assert first.status_code == 200, first.text
    assert chat(gw, "test/two").status_code == 404
    old = gw.gateway.revision

    same = reload(gw)
    assert same.status_code == 200, same.text
    assert same.json() == {"object": "config.reload", "revision": old, "previous_revision": old, "changed": False,
                           "sections": [], "other_workers_signalled": False}

    write(path, settings(a, b, tmp_path / "specway.db", models=("one", "two"), on="b"))
    r = reload(gw)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["changed"] is True and body["previous_revision"] == old and body["revision"] != old
    assert body["sections"] == ["models"]
    second = chat(gw, "test/two")
    assert second.status_code == 200, second.text
    assert b.requests and b.requests[-1].body["model"] == "two"  # the models moved to upstream b

    assert explain(gw, first.json()["id"])["config_revision"] == old
    assert explain(gw, second.json()["id"])["config_revision"] == body["revision"]
    models = httpx.get(f"{gw.url}/v1/models", headers=gw.headers, timeout=10).json()
    assert {m["id"] for m in models["data"]} >= {"test/one", "test/two"}

    entries = httpx.get(f"{gw.url}/v1/audit", params={"action": "config.reload"}, headers=gw.headers,
                        timeout=10).json()["data"]
    assert len(entries) == 1  # the unchanged reload wrote none
    changes = entries[0]["changes"]
    assert changes["revision"] == {"before": old, "after": body["revision"]}
    assert changes["models"] == {"before": ["test/one"], "after": ["test/one", "test/two"]}
    assert entries[0]["target_type"] == "config" and entries[0]["workspace_id"] is None
    assert api_key_free(entries[0])


def api_key_free(entry: dict[str, Any]) -> bool:
    return "sk-" not in json.dumps(entry)


@pytest.mark.parametrize(("broken", "code", "named"), [
    ("models: [oops", "config_invalid", "not valid YAML"),
    ({"models": [{"id": "test/x", "upstream": "nowhere", "name": "x"}]}, "config_invalid", "nowhere"),
    ({"server": {"port": 1}}, "restart_required", "server"),
    ({"store": {"url": "sqlite:///elsewhere.db"}}, "restart_required", "store"),
])
def test_a_file_that_cannot_be_reloaded_changes_nothing_and_says_why(
        setup: tuple[Live, Path], fakes: tuple[FakeUpstream, FakeUpstream], tmp_path: Path,
        broken: dict[str, Any] | str, code: str, named: str) -> None:
    gw, path = setup
    a, b = fakes
    before = gw.gateway.revision
    if isinstance(broken, str):
        write(path, broken)
    else:
        data = settings(a, b, tmp_path / "specway.db")
        data["models"] += broken.pop("models", [])
        data.update(broken)
        write(path, data)
    r = reload(gw)
    assert r.status_code == 409, r.text
    error = r.json()["error"]
    assert error["code"] == code and named in error["message"] and "not reloaded" in error["message"]
    assert gw.gateway.revision == before
    assert chat(gw, "test/one").status_code == 200


def test_an_upstream_whose_key_variable_is_unset_refuses_the_reload(
        setup: tuple[Live, Path], fakes: tuple[FakeUpstream, FakeUpstream], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    gw, path = setup
    a, b = fakes
    monkeypatch.delenv("SPECWAY_TEST_UNSET_KEY", raising=False)
    data = settings(a, b, tmp_path / "specway.db")
    data["upstreams"]["c"] = {"kind": "openai", "base_url": a.url, "api_key_env": "SPECWAY_TEST_UNSET_KEY"}
    write(path, data)
    r = reload(gw)
    assert r.status_code == 409 and r.json()["error"]["code"] == "config_invalid", r.text
    assert "SPECWAY_TEST_UNSET_KEY" in r.json()["error"]["message"]
    assert "c" not in gw.gateway.upstreams


def test_only_an_admin_key_reloads(setup: tuple[Live, Path]) -> None:
    gw, _ = setup
    key = gw.create_key(tuple(s for s in SCOPES if s != "admin"))
    r = reload(gw, key)
    assert r.status_code == 403 and r.json()["error"]["code"] == "insufficient_scope"


def test_streams_in_flight_finish_on_their_configuration_through_ten_reloads(
        setup: tuple[Live, Path], fakes: tuple[FakeUpstream, FakeUpstream], tmp_path: Path) -> None:
    """200 streams in flight while the file changes 10 times (upstream a's address moves between two servers, so
    every reload makes a new client and retires the old): none is lost, each is recorded under the revision it began on,
    and every replaced client is closed once its streams are over."""
    gw, path = setup
    a, b = fakes
    for fake in fakes:
        fake.responder = lambda _dialect, _body: Reply(text="one two three four five six", chunk_delay=0.15)

    first = gw.gateway.revision
    clients: list[Any] = list(gw.gateway.upstreams.values())  # every client any Setup had

    async def stream(client: httpx.AsyncClient, n: int) -> tuple[str, int]:
        body = {"model": "test/one", "stream": True, "messages": [{"role": "user", "content": f"hi {n}"}]}
        async with client.stream("POST", f"{gw.url}/v1/chat/completions", json=body, headers=gw.headers) as r:
            assert r.status_code == 200, await r.aread()
            lines = [line async for line in r.aiter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]", lines[-3:]
        return json.loads(lines[0][6:])["id"], len(lines)

    async def main() -> tuple[list[tuple[str, int]], list[dict[str, Any]]]:
        limits = httpx.Limits(max_connections=300, max_keepalive_connections=300)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            streams = [asyncio.create_task(stream(client, n)) for n in range(200)]
            reloads = []
            for i in range(10):
                await asyncio.sleep(0.1)
                data = settings(a, b, tmp_path / "specway.db")
                data["upstreams"]["a"]["base_url"] = (b if i % 2 == 0 else a).url  # a new client each time
                write(path, data)
                r = await client.post(f"{gw.url}/v1/admin/reload", headers=gw.headers)
                assert r.status_code == 200, r.text
                reloads.append(r.json())
                clients.extend(gw.gateway.latest.upstreams.values())
                chat_body = {"model": "test/one", "messages": [{"role": "user", "content": "between"}]}
                between = await client.post(f"{gw.url}/v1/chat/completions", json=chat_body, headers=gw.headers)
                assert between.status_code == 200, between.text
            return await asyncio.gather(*streams), reloads

    done, reloads = asyncio.run(main())
    assert len(done) == 200 and all(events > 3 for _, events in done)
    assert all(r["changed"] for r in reloads)
    assert [r["sections"] for r in reloads] == [["upstreams"]] * 10
    revisions = {explain(gw, answer_id)["config_revision"] for answer_id, _ in done}
    assert first in revisions and revisions <= {first} | {r["revision"] for r in reloads}
    assert a.requests and b.requests  # the model really moved between them
    wait_for(lambda: not gw.gateway._retiring, "the replaced Setups closed")
    serving = {id(up) for up in gw.gateway.upstreams.values()}
    replaced = [up for up in clients if id(up) not in serving]
    assert replaced and all(up._client.is_closed for up in replaced)  # their connections are given back
    assert not any(up._client.is_closed for up in gw.gateway.upstreams.values())


def serve_process(tmp_path: Path, data: dict[str, Any], *extra: str) -> tuple[Any, str, str, Path]:
    path = tmp_path / "specway.yaml"
    write(path, data)
    port = free_port()
    log = tmp_path / "serve.log"
    proc, key = spawn(path, port, log, *extra)
    return proc, key, f"http://127.0.0.1:{port}", log


def wait_for(check: Any, what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def models_served(url: str, key: str, tries: int = 12) -> set[frozenset[str]]:
    """What GET /v1/models lists, over several connections (so every worker is asked)."""
    seen = set()
    for _ in range(tries):
        with httpx.Client(timeout=10) as client:  # a new connection each time: the workers share the socket
            r = client.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"})
            seen.add(frozenset(m["id"] for m in r.json()["data"]))
    return seen


@pytest.mark.parametrize("workers", [1, 2])
def test_sighup_reloads_every_worker_and_a_broken_file_leaves_them_serving(
        fakes: tuple[FakeUpstream, FakeUpstream], tmp_path: Path, workers: int) -> None:
    a, b = fakes
    data = settings(a, b, tmp_path / "specway.db")
    proc, key, url, log = serve_process(tmp_path, data, "--workers", str(workers))
    try:
        assert models_served(url, key) == {frozenset({"test/one"})}
        write(tmp_path / "specway.yaml", settings(a, b, tmp_path / "specway.db", models=("one", "two")))
        os.kill(proc.pid, signal.SIGHUP)
        wait_for(lambda: models_served(url, key) == {frozenset({"test/one", "test/two"})}, "every worker reloaded")
        assert proc.poll() is None

        write(tmp_path / "specway.yaml", "upstreams: [")
        os.kill(proc.pid, signal.SIGHUP)
        wait_for(lambda: "not reloaded" in log.read_text(), "the refusal in the log")
        assert models_served(url, key) == {frozenset({"test/one", "test/two"})} and proc.poll() is None

        write(tmp_path / "specway.yaml", settings(a, b, tmp_path / "specway.db", models=("three",)))
        r = httpx.post(f"{url}/v1/admin/reload", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        assert r.status_code == 200 and r.json()["other_workers_signalled"] is (workers > 1), r.text
        wait_for(lambda: models_served(url, key) == {frozenset({"test/three"})}, "the siblings followed")
        entries = httpx.get(f"{url}/v1/audit", params={"action": "config.reload"},
                            headers={"Authorization": f"Bearer {key}"}, timeout=10).json()["data"]
        assert [e["actor_key_id"] is None for e in entries] == [False, True]  # one entry per reload: key, operator
    finally:
        stop(proc)


def test_a_reload_signalled_while_a_worker_starts_is_applied_once_it_listens(
        fakes: tuple[FakeUpstream, FakeUpstream], tmp_path: Path) -> None:
    """A worker ignored a reload's signals until it listened for them, so one that had read the file before it
    changed kept the old configuration while its siblings reloaded (seen in CI: `--workers 2`, `pkill -HUP` as the
    second worker started). Held, the signal is acted on once the worker listens: a reload, quietly."""
    a, b = fakes
    path = tmp_path / "specway.yaml"
    write(path, settings(a, b, tmp_path / "specway.db"))
    reloads = {"outcome": "unchanged"}
    before = REGISTRY.get_sample_value("specway_config_reloads_total", reloads) or 0
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGHUP, signal.SIGUSR2)}
    try:
        reloading.hold_signals()
        os.kill(os.getpid(), signal.SIGUSR2)  # a sibling's word, while this "worker" starts
        wait_for(lambda: signal.SIGUSR2 in reloading._HELD, "the signal held")
        with serve(None, tmp_path, path=path):
            wait_for(lambda: REGISTRY.get_sample_value("specway_config_reloads_total", reloads) == before + 1,
                     "the held signal's reload")
        assert not reloading._HELD
    finally:
        for sig, handler in kept.items():
            signal.signal(sig, handler)
        reloading._HELD.clear()
