"""One load cell: N keep-alive connections POSTing a ~1 KB chat request for D seconds, with wrk or the built-in loader.

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
from bench.targets import Target

SCENARIOS = ("json", "stream")  # non-streaming chat.completion; SSE stream of 10 chunks + usage + [DONE]
_MARK = "BENCH_JSON "
_PROMPT = ("Summarise the following notes for an on-call engineer in three short bullet points, keeping every number "
           "exactly as written. ")
_NOTES = "Gateway p50 rose from 2.1 ms to 2.4 ms after the 0.3 release; upstream errors stayed under 0.1 %. "


def request_body(model: str, scenario: str) -> bytes:
    """A ~1 KB Chat Completions request (what an SDK sends), streaming with usage for the stream scenario."""
    body: dict[str, object] = {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a concise assistant for a platform team. Answer in English."},
            {"role": "user", "content": _PROMPT + _NOTES * 8},
        ],
        "max_tokens": 256,
        "temperature": 0.2,
    }
    if scenario == "stream":
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass
class CellResult:
    loadgen: str
    requests: int  # answered with 2xx/3xx
    errors: int  # non-2xx/3xx answers, connect/read/write errors, timeouts
    seconds: float
    p50_ms: float
    p90_ms: float
    p99_ms: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def check(target: Target, scenario: str) -> None:
    """One request before the load: the answer must be a 200 of the right shape, or the numbers would mean nothing."""
    status, body = http_post(target.url, request_body(target.model, scenario), target.headers)
    problem = None
    if status != 200:
        problem = f"status {status}"
    elif scenario == "json":
        try:
            ok = bool(json.loads(body)["choices"][0]["message"]["content"])
        except (ValueError, KeyError, IndexError, TypeError):
            ok = False
        problem = None if ok else "no choices[0].message.content"
    elif body.count(b"data:") < 10 or b"data: [DONE]" not in body:
        problem = "not an SSE stream of >= 10 events ending in data: [DONE]"
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
    headers = "\n".join(f'wrk.headers["{k}"] = "{v}"' for k, v in target.headers.items())
    body = request_body(target.model, scenario).decode()
    path = workdir / f"{target.name}-{scenario}.lua"
    path.write_text(_LUA % {"body": body, "headers": headers, "mark": _MARK})
    return path


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


def run_cell(target: Target, scenario: str, conns: int, seconds: float, loadgen: str, workdir: Path) -> CellResult:
    if loadgen == "wrk":
        script = wrk_script(target, scenario, workdir)
        cmd = ["wrk", "-t1", f"-c{conns}", f"-d{seconds:g}s", "--timeout", "30s", "-s", str(script), target.url]
    else:
        cmd = [sys.executable, "-m", "bench.loadgen", "--url", target.url, "--conns", str(conns),
               "--seconds", str(seconds), "--body-file", str(_body_file(target, scenario, workdir))]
        cmd += [f"--header={k}: {v}" for k, v in target.headers.items()]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60, check=False)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith(_MARK)), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"{loadgen} failed ({out.returncode}): {out.stderr.strip()[-800:] or out.stdout[-800:]}")
    data = json.loads(line[len(_MARK):])
    errors = sum(int(v) for v in data["errors"].values())
    ok = int(data["requests"]) - int(data["errors"]["status"])
    return CellResult(loadgen, ok, errors, data["duration_us"] / 1e6,
                      data["p50_us"] / 1e3, data["p90_us"] / 1e3, data["p99_us"] / 1e3)


def _body_file(target: Target, scenario: str, workdir: Path) -> Path:
    path = workdir / f"{target.name}-{scenario}.json"
    path.write_bytes(request_body(target.model, scenario))
    return path
