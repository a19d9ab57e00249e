"""Tests of the harness itself (not of speed): `.venv/bin/python -m pytest bench`. No wall-clock assertions."""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench import load, loadgen, paired, report, startup, targets, upstream
from bench.procs import free_port, stop_all


class _Transport:
    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.out += data

    def close(self) -> None:
        self.closed = True


def _feed(data: bytes, step: int) -> _Transport:
    conn, transport = upstream.HttpConnection(), _Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    for i in range(0, len(data), step):
        conn.data_received(data[i:i + step])
    return transport


def _post(body: bytes, extra: str = "") -> bytes:
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n").encode() + body


@pytest.mark.parametrize("step", [1, 7, 10_000])
def test_upstream_answers_pipelined_requests_in_any_split(step: int) -> None:
    parts = [b'{"str', b'eam": true, "a":1}']
    chunked = (b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
               + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n")
    data = _post(b'{"model":"m"}') + _post(b'{"stream":true}') + chunked + _post(b"{}", "Connection: close\r\n")
    t = _feed(data, step)
    answers = t.out.split(b"HTTP/1.1 ")[1:]
    assert [a[:3] for a in answers] == [b"200"] * 4
    assert b"application/json" in answers[0] and b"text/event-stream" in answers[1]
    assert b"text/event-stream" in answers[2] and b"Connection: close" in answers[3]
    assert t.closed


def test_upstream_refuses_bad_json_and_unknown_paths() -> None:
    t = _feed(_post(b"{nope") + b"GET /nowhere HTTP/1.1\r\n\r\n" + b"GET /health HTTP/1.1\r\n\r\n", 64)
    assert [a[:3] for a in t.out.split(b"HTTP/1.1 ")[1:]] == [b"400", b"404", b"200"]


def test_upstream_stream_is_10_chunks_usage_done() -> None:
    events = upstream.stream_events()
    docs = [json.loads(e[len(b"data: "):]) for e in events[:-1]]
    assert len(docs) == 11 and events[-1] == b"data: [DONE]\n\n"
    assert docs[0]["choices"][0]["delta"]["role"] == "assistant"
    assert docs[9]["choices"][0]["finish_reason"] == "stop"
    assert docs[10]["choices"] == [] and docs[10]["usage"]["total_tokens"] == 430
    assert 900 <= len(upstream.completion_body()) <= 1300


def test_request_bodies_are_about_1kb() -> None:
    for scenario in load.SCENARIOS:
        body = load.request_body("bench/model", scenario)
        assert 800 <= len(body) <= 1300
        assert json.loads(body).get("stream", False) is (load.SCENARIOS[scenario].kind == "stream")


def test_wrk_script_carries_body_and_headers(tmp_path: Path) -> None:
    t = targets.Target("specway", "http://127.0.0.1:1", "bench/model", None, {"Authorization": "Bearer sk-x"})  # type: ignore[arg-type]
    text = load.wrk_script(t, "stream", tmp_path).read_text()
    assert '"stream":true' in text and 'wrk.headers["Authorization"] = "Bearer sk-x"' in text
    assert "latency:percentile(99)" in text


def _sample(target: str, rps: float, p50: float, conns: int = 1) -> report.Sample:
    cell = load.CellResult("wrk", int(rps * 10), 0, 10.0, p50, p50 * 2, p50 * 3)
    return report.Sample(target, "json", conns, cell, cpu_s=cell.requests * 0.001, rss_mb=90.0)


def test_rows_put_direct_beside_each_gateway_with_ratios() -> None:
    rows = report.rows([_sample("direct", 10_000, 0.1), _sample("specway", 1000, 1.1), _sample("litellm", 100, 20.1)])
    assert [r["target"] for r in rows] == ["specway", "litellm"]
    sw, peer = rows
    assert sw["added_p50_ms"] == pytest.approx(1.0) and sw["x_direct"] == pytest.approx(0.1)
    assert sw["cpu_ms_per_req"] == pytest.approx(1.0) and "specway_over_peer" not in sw
    assert peer["specway_over_peer"] == pytest.approx(10.0)
    assert "x10.0" in report.table(rows)


def test_repeats_are_reported_as_medians() -> None:
    rows = report.rows([_sample("specway", r, 1.0) for r in (100, 900, 300)])
    assert rows[0]["rps"] == pytest.approx(300) and rows[0]["repeats"] == 3


def test_peer_env_reads_exports_and_unsets(tmp_path: Path) -> None:
    env_sh = tmp_path / "env.sh"
    env_sh.write_text("# c\nexport A=1  B=two   # why\nexport NO_PROXY=127.0.0.1,localhost\nunset X Y\n")
    exports, unset = targets.peer_env(env_sh)
    assert exports == {"A": "1", "B": "two", "NO_PROXY": "127.0.0.1,localhost"} and unset == ("X", "Y")


def test_builtin_loader_against_the_fake_upstream(tmp_path: Path) -> None:
    try:
        up = targets.start_upstream(tmp_path, free_port())
        result: dict[str, Any] = asyncio.run(
            loadgen.run(up.url, 4, 0.5, load.request_body("m", "stream"), [], timeout=10))
    finally:
        stop_all()
    assert result["requests"] > 0 and not any(result["errors"].values())
    assert 0 < result["p50_us"] <= result["p99_us"]
    assert 0 < result["first_p50_us"] <= result["p99_us"]


def test_a_paced_stream_keeps_its_events_apart_and_the_connection_alive(tmp_path: Path) -> None:
    """The paced model's events come one by one (the first chunk is one event), and the next request on the same
    connection is answered after the stream."""
    body = json.dumps({"model": upstream.PACED_MODEL, "stream": True}).encode()

    async def two() -> list[bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", int(up.base.rsplit(":", 1)[1]))
        firsts = []
        for _ in range(2):
            writer.write(_post(body))
            await reader.readuntil(b"\r\n\r\n")
            size = int(await reader.readline(), 16)
            firsts.append(await reader.readexactly(size + 2))
            rest = await reader.readuntil(b"0\r\n\r\n")
            assert rest.count(b"data: ") == 11 and b"[DONE]" in rest
        writer.close()
        return firsts

    try:
        up = targets.start_upstream(tmp_path, free_port())
        firsts = asyncio.run(two())
    finally:
        stop_all()
    assert all(f.count(b"data: ") == 1 and b'"role":"assistant"' in f for f in firsts)


def test_every_scenario_has_a_body_and_path_in_its_format() -> None:
    gw = targets.Target("specway", "http://127.0.0.1:1", "bench/model", None)  # type: ignore[arg-type]
    direct = targets.Target("direct", "http://127.0.0.1:2", "bench-model", None)  # type: ignore[arg-type]
    for name, sc in load.SCENARIOS.items():
        url, body = load.request(gw, name)
        doc = json.loads(body)
        assert url.endswith({"chat": "/v1/chat/completions", "messages": "/v1/messages",
                             "responses": "/v1/responses"}[sc.fmt])
        assert doc["model"] == (targets.PACED_MODEL if sc.paced else targets.PRICED_MODEL if sc.priced
                                else targets.FREE_MODEL)
        assert ("messages" in doc) is (sc.fmt != "responses") and ("input" in doc) is (sc.fmt == "responses")
        # the direct upstream and the ceilings get the plain chat request of the same kind
        d_url, d_body = load.request(direct, name)
        upstream_model = upstream.PACED_MODEL if sc.paced else "bench-model"
        assert d_url == "http://127.0.0.1:2/v1/chat/completions"
        assert d_body == load.request_body(upstream_model, sc.kind)


def test_each_cell_loads_direct_ceilings_and_the_gateway_of_its_store() -> None:
    names = ["direct", "httpx-ceiling", "aiohttp-ceiling", "specway", "specway-pg", "baseline", "litellm"]
    tgts = [targets.Target(n, "http://x", "m", None) for n in names]  # type: ignore[arg-type]
    picked = {sc: [t.name for t in load.targets_for(sc, tgts)] for sc in load.SCENARIOS}
    assert picked["json"] == ["direct", "httpx-ceiling", "aiohttp-ceiling", "specway", "baseline", "litellm"]
    assert picked["priced-sqlite"] == ["direct", "httpx-ceiling", "aiohttp-ceiling", "specway", "baseline"]
    assert picked["priced-postgres"] == ["direct", "httpx-ceiling", "aiohttp-ceiling", "specway-pg"]
    assert picked["messages"] == picked["responses"] == picked["priced-sqlite"]
    assert picked["stream-paced"] == picked["priced-sqlite"]  # LiteLLM's config has no paced model
    assert set(load.DEFAULT_SCENARIOS) <= set(load.SCENARIOS)
    # a priced cell also loads its own gateway with the free JSON request, right before the priced one
    pg = [(t.name, body, row) for t, body, row in load.plan("priced-postgres", tgts)]
    assert pg[-2:] == [("specway-pg", "json", "specway-pg:json"), ("specway-pg", "priced-postgres", "specway-pg")]
    assert [row for _, _, row in load.plan("json", tgts)] == picked["json"]
    # the baseline gets the same free request first, so that an A/B compares gateways that did the same work
    assert [row for _, _, row in load.plan("messages", tgts)][-4:] == ["specway:json", "specway", "baseline:json",
                                                                        "baseline"]
    # every other repeat the baseline goes first, each with its free request right before its own
    assert [row for _, _, row in load.plan("messages", tgts, baseline_first=True)][-4:] == [
        "baseline:json", "baseline", "specway:json", "specway"]
    assert [row for _, _, row in load.plan("json", tgts, baseline_first=True)] == [
        "direct", "httpx-ceiling", "aiohttp-ceiling", "baseline", "specway", "litellm"]
    assert load.plan("priced-postgres", tgts, baseline_first=True) == load.plan("priced-postgres", tgts)


def test_specway_config_has_a_free_and_a_priced_model_on_one_upstream() -> None:
    cfg: Any = targets.specway_config(8080, "http://127.0.0.1:18000", "postgresql://h/db", "warning")
    assert cfg["store"] == {"url": "postgresql://h/db"} and cfg["server"]["workers"] == 1
    assert cfg["upstreams"]["fake"] == {"kind": "openai", "base_url": "http://127.0.0.1:18000/v1"}
    free, priced, paced = cfg["models"]
    assert free["id"] == targets.FREE_MODEL and "price" not in free
    assert paced == {"id": targets.PACED_MODEL, "upstream": "fake", "name": upstream.PACED_MODEL}
    assert priced["id"] == targets.PRICED_MODEL and priced["price"] == targets.PRICE
    assert free["upstream"] == priced["upstream"] == "fake" and free["name"] == priced["name"]


def _cell(target: str, scenario: str, rps: float, p50: float, conns: int = 32) -> report.Sample:
    cell = load.CellResult("wrk", int(rps * 10), 0, 10.0, p50, p50, p50)
    return report.Sample(target, scenario, conns, cell, cpu_s=cell.requests * 0.001, rss_mb=90.0)


def test_rows_give_ratios_to_the_httpx_ceiling_and_to_free_json() -> None:
    rows = report.rows([
        _cell("direct", "json", 10_000, 0.1), _cell("httpx-ceiling", "json", 2000, 0.7),
        _cell("aiohttp-ceiling", "json", 4000, 0.3), _cell("specway", "json", 600, 1.6),
        _cell("direct", "priced-postgres", 10_000, 0.1), _cell("httpx-ceiling", "priced-postgres", 2000, 0.7),
        _cell("specway-pg", "priced-postgres", 150, 6.1), _cell("specway-pg:json", "priced-postgres", 600, 1.6),
    ])
    by = {(r["scenario"], r["target"]): r for r in rows}
    assert [r["target"] for r in rows] == ["specway", "httpx-ceiling", "aiohttp-ceiling",
                                           "specway-pg:json", "specway-pg", "httpx-ceiling"]
    assert by["json", "specway"]["x_ceiling"] == pytest.approx(0.3)
    assert by["json", "specway"]["added_p50_x_ceiling"] == pytest.approx(2.5)
    assert by["json", "httpx-ceiling"]["x_ceiling"] == pytest.approx(1.0)
    assert by["json", "aiohttp-ceiling"]["specway_over_peer"] == pytest.approx(0.15)
    assert by["priced-postgres", "specway-pg"]["x_free"] == pytest.approx(0.25)
    assert by["priced-postgres", "httpx-ceiling"]["specway_over_peer"] == pytest.approx(0.075)
    assert "x_free" not in by["json", "specway"]
    text = report.table(rows)
    assert "x httpx ceiling" in text and "x free json" in text and "specway-pg" in text


def test_ceiling_apps_import_and_route_chat() -> None:
    from bench import ceiling_aiohttp, ceiling_httpx

    for app in (ceiling_httpx.app, ceiling_aiohttp.app):
        assert [r.path for r in app.routes] == ["/v1/chat/completions"]  # type: ignore[attr-defined]


def test_ceilings_relay_json_and_stream_from_the_fake_upstream(tmp_path: Path) -> None:
    try:
        up = targets.start_upstream(tmp_path, free_port())
        for which in targets.CEILINGS:
            ceiling = targets.start_ceiling(tmp_path, up, which)
            for scenario in ("json", "stream"):
                load.check(ceiling, scenario)  # raises unless a 200 of the right shape
    finally:
        stop_all()


def test_startup_config_names_three_upstreams_whose_models_the_data_prices() -> None:
    from handlers import config
    from handlers.inference.catalog import Catalog

    catalog = Catalog.from_config(config.parse(yaml.safe_load(startup.THREE_UPSTREAMS), "bench/startup.py"))
    assert {m.upstream for m in catalog.models} == {"openai", "anthropic", "gemini"} and catalog.unknown == ()


def test_startup_runs_a_command_and_tabulates_it(tmp_path: Path) -> None:
    tree = startup.Tree("this", startup.REPO, tmp_path)
    wall, cpu = tree.command(["--help"])
    assert wall > 0 and cpu > 0
    shown = startup.table({"specway --help": {"this": [(wall, cpu)]}}, ["this"], 1)
    assert shown.splitlines()[1].startswith("specway --help") and "this CPU ms" in shown


def test_thread_cpu_counts_the_main_thread_and_the_others_apart(tmp_path: Path) -> None:
    script = ("import threading, time\n"
              "spun = threading.Event()\n"
              "def spin():\n"
              "    while time.thread_time() < 0.4: pass\n"
              "    spun.set(); time.sleep(30)\n"  # alive: an ended thread leaves /proc with its time
              "threading.Thread(target=spin, daemon=True).start(); spun.wait()\n"
              "print('spun', flush=True); time.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "spun"
        seconds = paired.thread_cpu(proc.pid)
        assert seconds["threads"] >= 0.4 - 0.02  # the clock ticks in hundredths
        assert seconds["loop"] < seconds["threads"]
    finally:
        proc.kill()
        proc.wait()


def test_paired_runs_load_each_variant_in_turn_and_read_its_cpu(tmp_path: Path) -> None:
    try:
        rows = paired.run([("a", "ceiling"), ("b", "ceiling")], "json", 2, 0.5, 2, 0.2, "builtin", tmp_path)
    finally:
        stop_all()
    assert sorted(rows) == ["a", "b"] and all(len(runs) == 2 for runs in rows.values())
    for run in (r for runs in rows.values() for r in runs):
        assert run["errors"] == 0 and run["req/s"] > 0
        assert run["loop"] > 0 and run["all"] == run["loop"] + run["threads"]


@pytest.mark.parametrize("text", ["HEAD", "=HEAD", "new=", "new"])
def test_a_paired_variant_is_a_name_and_a_tree(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        paired.variant(text)
    assert paired.variant("new=HEAD") == ("new", "HEAD")
