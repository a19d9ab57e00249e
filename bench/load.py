"""One load cell: N keep-alive connections POSTing a ~1 KB request for D seconds, with wrk or the built-in loader.

A scenario says what a gateway is sent (format, path, free or priced model) and which gateway config it needs (the
store); the direct upstream and the ceiling relays are sent the Chat Completions request of the scenario's `kind`
(json or stream), the same work for the upstream.

Both loaders print one line `BENCH_JSON {...}` (requests, duration, latency percentiles in microseconds, errors by
kind), so the rest of the harness does not care which one ran.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.procs import http_post
from bench.targets import CHAT_PATH, FREE_MODEL, PACED_MODEL, PRICED_MODEL, Target
from bench.upstream import PACED_MODEL as UPSTREAM_PACED


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str  # json | stream: what the direct upstream and the ceilings get in the same cell, and the check
    fmt: str = "chat"  # chat | messages | responses: the body and path a gateway gets
    priced: bool = False  # the gateway's priced model (reserve + settle against the workspace's credit)
    store: str = "sqlite"  # the gateway config it needs: sqlite | postgres (one gateway per distinct store)
    vs: str | None = None  # the free scenario its req/s is compared with (the "/free" column)
    paced: bool = False  # the upstream streams one event every 20 ms (bench.upstream's paced model)


SCENARIOS = {s.name: s for s in (
    Scenario("json", "json"),  # non-streaming chat.completion
    Scenario("stream", "stream"),  # SSE stream of 10 chunks + usage + [DONE]
    Scenario("stream-paced", "stream", paced=True),  # the same, one event every 20 ms: the time to the first event
    Scenario("messages-stream", "stream", fmt="messages", vs="stream"),  # Messages in, streamed, translated
    Scenario("priced-sqlite", "json", priced=True, vs="json"),
    Scenario("priced-postgres", "json", priced=True, store="postgres", vs="json"),
    Scenario("messages", "json", fmt="messages", vs="json"),  # Messages in, translated to the openai upstream
    Scenario("responses", "json", fmt="responses", vs="json"),  # Responses in, translated likewise
)}
DEFAULT_SCENARIOS = ("json", "stream")
PATHS = {"chat": CHAT_PATH, "messages": "/v1/messages", "responses": "/v1/responses"}
GATEWAYS = ("specway", "specway-pg", "baseline")  # targets that get the scenario's own body and path
FORMAT_HEADERS = {"messages": {"anthropic-version": "2023-06-01"}}
_MARK = "BENCH_JSON "
_PROMPT = ("Summarise the following notes for an on-call engineer in three short bullet points, keeping every number "
           "exactly as written. ")
_NOTES = "Gateway p50 rose from 2.1 ms to 2.4 ms after the 0.3 release; upstream errors stayed under 0.1 %. "


def request_body(model: str, scenario: str, fmt: str = "chat") -> bytes:
    """A ~1 KB request (what an SDK sends) in `fmt`; Chat Completions streams with usage for a stream scenario."""
    system = "You are a concise assistant for a platform team. Answer in English."
    user = _PROMPT + _NOTES * 8
    body: dict[str, object]
    if fmt == "messages":
        body = {"model": model, "max_tokens": 256, "system": system, "messages": [{"role": "user", "content": user}],
                "temperature": 0.2}
    elif fmt == "responses":
        body = {"model": model, "instructions": system, "input": user, "max_output_tokens": 256, "temperature": 0.2}
    else:
        body = {"model": model, "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
                "max_tokens": 256, "temperature": 0.2}
    if SCENARIOS[scenario].kind == "stream":
        body["stream"] = True
        if fmt == "chat":
            body["stream_options"] = {"include_usage": True}
    return json.dumps(body, separators=(",", ":")).encode()


def request(target: Target, scenario: str) -> tuple[str, bytes]:
    """The URL and body `target` gets in a cell of `scenario`."""
    sc = SCENARIOS[scenario]
    if target.name not in GATEWAYS:  # direct, ceilings, LiteLLM: the plain chat request of the same kind
        return target.url, request_body(UPSTREAM_PACED if sc.paced else target.model, sc.kind)
    model = PACED_MODEL if sc.paced else PRICED_MODEL if sc.priced else FREE_MODEL
    return target.base + PATHS[sc.fmt], request_body(model, scenario, sc.fmt)


def headers(target: Target, scenario: str) -> dict[str, str]:
    """The headers `target` gets in a cell of `scenario`: its key, and what the format's SDK sends with every request
    (the Anthropic SDK's `anthropic-version`)."""
    fmt = SCENARIOS[scenario].fmt if target.name in GATEWAYS else "chat"
    return {**target.headers, **FORMAT_HEADERS.get(fmt, {})}


def targets_for(scenario: str, tgts: list[Target]) -> list[Target]:
    """The targets loaded in a cell of `scenario`: direct and the ceilings always, the gateway of the scenario's
    store, the baseline on SQLite, LiteLLM only for the free chat scenarios."""
    sc = SCENARIOS[scenario]
    gateway = "specway-pg" if sc.store == "postgres" else "specway"
    free_chat = sc.fmt == "chat" and not sc.priced and not sc.paced  # the peer's config maps bench-model alone
    keep = {"direct", "httpx-ceiling", "aiohttp-ceiling", gateway}
    keep |= {"baseline"} if sc.store == "sqlite" else set()
    keep |= {"litellm"} if free_chat else set()
    return [t for t in tgts if t.name in keep]


def plan(scenario: str, tgts: list[Target], baseline_first: bool = False) -> list[tuple[Target, str, str]]:
    """A cell's loads in order, as (target, the scenario whose request it gets, the row's name). A scenario compared
    with a free one (`vs`) also loads its gateway with that free request right before it ("specway:json"), so the
    priced/free (or translated/passthrough) ratio compares neighbours in time, on the same process and store; and the
    baseline likewise ("baseline:json"), so that both carry the same writes of that row into their own. With
    `baseline_first` the baseline's loads come before the gateway's (the bench alternates, repeat by repeat, so that
    an A/B does not always load the same side first)."""
    sc = SCENARIOS[scenario]
    out = []
    loaded = targets_for(scenario, tgts)
    if baseline_first:
        sides = [t for t in loaded if t.name in ("specway", "baseline")]
        if len(sides) == 2:
            at = [loaded.index(t) for t in sides]
            loaded[at[0]], loaded[at[1]] = sides[1], sides[0]
    for t in loaded:
        if sc.vs and t.name in ("specway", "specway-pg", "baseline"):
            out.append((t, sc.vs, f"{t.name}:{sc.vs}"))
        out.append((t, scenario, t.name))
    return out


@dataclass
class CellResult:
    loadgen: str
    requests: int  # answered with 2xx/3xx
    errors: int  # non-2xx/3xx answers, connect/read/write errors, timeouts
    seconds: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    first_p50_ms: float | None = None  # the time to the body's first chunk (a stream's first event); builtin only

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def _text(doc: dict[str, object], fmt: str) -> object:
    if fmt == "messages":
        return doc["content"][0]["text"]  # type: ignore[index]
    if fmt == "responses":
        return next(c["text"] for o in doc["output"] if o.get("type") == "message"  # type: ignore[attr-defined]
                    for c in o["content"])
    return doc["choices"][0]["message"]["content"]  # type: ignore[index]


def check(target: Target, scenario: str) -> None:
    """One request before the load: the answer must be a 200 of the right shape, or the numbers would mean nothing."""
    url, payload = request(target, scenario)
    status, body = http_post(url, payload, headers(target, scenario))
    sc = SCENARIOS[scenario]
    fmt = sc.fmt if target.name in GATEWAYS else "chat"
    problem = None
    if status != 200:
        problem = f"status {status}"
    elif sc.kind == "json":
        try:
            ok = bool(_text(json.loads(body), fmt))
        except (ValueError, KeyError, IndexError, TypeError, StopIteration, AttributeError):
            ok = False
        problem = None if ok else f"no answer text in the {fmt} shape"
    elif body.count(b"data:") < 10 or (b"event: message_stop" if fmt == "messages" else b"data: [DONE]") not in body:
        problem = "not an SSE stream of >= 10 events ending in data: [DONE] (Messages: message_stop)"
    if problem:
        raise RuntimeError(f"{target.name} {scenario}: {problem}; body: {body[:500]!r}")


_LUA = """\
wrk.method = "POST"
wrk.body = [==[%(body)s]==]
wrk.headers["Content-Type"] = "application/json"
%(headers)s
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '%(mark)s{"requests":%%.0f,"duration_us":%%.0f,"p50_us":%%.0f,"p90_us":%%.0f,"p99_us":%%.0f,' ..
    '"errors":{"connect":%%.0f,"read":%%.0f,"write":%%.0f,"status":%%.0f,"timeout":%%.0f}}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    e.connect, e.read, e.write, e.status, e.timeout))
end
"""


def wrk_script(target: Target, scenario: str, workdir: Path) -> Path:
    lines = "\n".join(f'wrk.headers["{k}"] = "{v}"' for k, v in headers(target, scenario).items())
    body = request(target, scenario)[1].decode()
    path = workdir / f"{target.name}-{scenario}.lua"
    path.write_text(_LUA % {"body": body, "headers": lines, "mark": _MARK})
    return path


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


def run_cell(target: Target, scenario: str, conns: int, seconds: float, loadgen: str, workdir: Path) -> CellResult:
    url = request(target, scenario)[0]
    if loadgen == "wrk":
        script = wrk_script(target, scenario, workdir)
        cmd = ["wrk", "-t1", f"-c{conns}", f"-d{seconds:g}s", "--timeout", "30s", "-s", str(script), url]
    else:
        cmd = [sys.executable, "-m", "bench.loadgen", "--url", url, "--conns", str(conns),
               "--seconds", str(seconds), "--body-file", str(_body_file(target, scenario, workdir))]
        cmd += [f"--header={k}: {v}" for k, v in headers(target, scenario).items()]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60, check=False)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith(_MARK)), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"{loadgen} failed ({out.returncode}): {out.stderr.strip()[-800:] or out.stdout[-800:]}")
    data = json.loads(line[len(_MARK):])
    errors = sum(int(v) for v in data["errors"].values())
    ok = int(data["requests"]) - int(data["errors"]["status"])
    first = data.get("first_p50_us")
    return CellResult(loadgen, ok, errors, data["duration_us"] / 1e6,
                      data["p50_us"] / 1e3, data["p90_us"] / 1e3, data["p99_us"] / 1e3,
                      None if first is None else first / 1e3)


def loader_for(scenario: str, choice: str, resolved: str) -> str:
    """The loader of a cell: wrk cannot time a stream's first event, so `auto` runs streams on the built-in one."""
    return "builtin" if choice == "auto" and SCENARIOS[scenario].kind == "stream" else resolved


def _body_file(target: Target, scenario: str, workdir: Path) -> Path:
    path = workdir / f"{target.name}-{scenario}.json"
    path.write_bytes(request(target, scenario)[1])
    return path
