"""Scale: N concurrent slow streams through one gateway (several workers, PostgreSQL, a priced model), every one
complete and charged exactly, the gateway's memory sampled; then more requests than its limits admit, which must be
refused at once with 503 and Retry-After while the admitted streams are still open.

    python -m bench.scale --streams 10000 --json scale.json

Starts the fake upstream in its slow-stream mode, the gateway on a fresh PostgreSQL database (dropped at the end)
with `server.max_requests`, `server.max_connections` and the upstream pool sized from --streams (each worker may hold
--headroom times its share of the streams), credits its workspace, then:

1. opens --streams streaming Chat Completions requests to the priced model, one connection each, at most
   --arriving of them at a time waiting for their answer's first byte; each must end with its usage chunk and
   `data: [DONE]`;
2. once every one of them has begun, opens --overflow more (default: enough that the workers' connection limits
   are passed by a tenth of --streams), and once those have begun or been answered, a second wave of a twentieth
   of --streams (at least 20), sent to workers the first left full (or nearly: which worker accepts a connection is
   the kernel's choice); no more may be admitted than the workers' max_requests: each request must be either
   refused, 503 `overloaded` with Retry-After, or admitted and streamed like the others. Refusals are timed (request written to answer read) and
   must all have arrived before the first admitted stream ended;
3. waits for the bookkeeping, then checks that the key's spend, the sum of the decision records' costs and the usage
   report's cost each equal the answered streams times one stream's price, and that there is one decision record per
   answered stream.

The RSS of the gateway's processes (the supervisor and its workers, from /proc) is sampled throughout; the peak while
only the --streams streams were open must stay under --rss-limit-mb. Exit status 0 when every check holds. Not a
test of speed: its times are reported, never judged, except that a refusal must come before a stream's end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import resource
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from bench import targets
from bench.procs import StartError, http_get, process_tree, stop_all
from bench.streams import Answer, http_request, one
from bench.upstream import USAGE, WORDS

MB = 1024 * 1024


@dataclass(frozen=True)
class Plan:
    streams: int
    workers: int
    max_requests: int  # per worker
    max_connections: int  # per worker
    waves: tuple[int, ...]  # requests sent past the limits, one wave after the other
    chunks: int
    delay: float

    @property
    def stream_seconds(self) -> float:
        return (self.chunks + 1) * self.delay  # the upstream's gaps: between content events, then to the usage


def plan_for(args: argparse.Namespace) -> Plan:
    share = math.ceil(args.streams / args.workers)
    max_requests = math.ceil(share * args.headroom)
    max_connections = max_requests + math.ceil(share * 0.1)
    overflow = args.overflow
    if overflow is None:  # past every worker's connection limit by a tenth of the streams
        overflow = args.workers * max_connections - args.streams + math.ceil(args.streams * 0.1)
    waves = (overflow, max(20, math.ceil(args.streams * 0.05))) if overflow else ()
    return Plan(args.streams, args.workers, max_requests, max_connections, waves, args.chunks, args.chunk_delay)


def unit_cost() -> Decimal:
    """One answered stream's price: the upstream's usage at the priced model's prices (per million tokens)."""
    return (USAGE["prompt_tokens"] * Decimal(targets.PRICE["input"])
            + USAGE["completion_tokens"] * Decimal(targets.PRICE["output"])) / 1_000_000


def raise_open_files() -> int:
    """Our sockets: one per request. Take the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 1 << 20, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class RssSampler(threading.Thread):
    """The summed VmRSS of a process tree, every `every` seconds, in a thread (the loop is busy with sockets)."""

    def __init__(self, pid: int, every: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, float, int]] = []  # (perf_counter, MB, processes)
        self.stopped = threading.Event()

    def read(self) -> tuple[float, int]:
        kb, pids = 0, process_tree(self.pid)
        for p in pids:
            with contextlib.suppress(OSError, ValueError, IndexError):
                for line in Path(f"/proc/{p}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        kb += int(line.split()[1])
        return kb / 1024, len(pids)

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            mb, n = self.read()
            self.samples.append((time.perf_counter(), mb, n))

    def peak(self, start: float = 0.0, end: float = math.inf) -> float:
        return max((mb for t, mb, _ in self.samples if start <= t <= end), default=0.0)


# --- the streams -------------------------------------------------------------------------------------------------

def stream_text(chunks: int) -> str:
    """What a slow stream of the fake upstream says, all its content events together."""
    return "".join(WORDS[i % len(WORDS)] for i in range(chunks))


def stream_problem(answer: Answer, text: str) -> str | None:
    """Why `answer` is not a whole stream (None when it is): a 200 whose events carry all of `text`, a finish
    reason, the upstream's usage and then `data: [DONE]`."""
    if answer.error:
        return answer.error
    if answer.status != 200:
        return f"status {answer.status}"
    _, body = answer.head_and_body()
    events = [ln[6:] for ln in body.split(b"\n") if ln.startswith(b"data: ")]
    if not events or events[-1] != b"[DONE]":
        return "no [DONE]"
    try:
        docs = [json.loads(e) for e in events[:-1]]
    except ValueError:
        return "a torn event"
    said = "".join(c["delta"].get("content") or "" for d in docs for c in d["choices"])
    if said != text:
        return "content lost"
    if not any(c.get("finish_reason") == "stop" for d in docs for c in d["choices"]):
        return "no finish reason"
    usage = docs[-1].get("usage") or {}
    return None if usage.get("total_tokens") == USAGE["total_tokens"] else "no usage"


def refusal_problem(answer: Answer) -> str | None:
    """Why a refused answer is not a proper refusal: 503 `overloaded` with a Retry-After."""
    headers, body = answer.head_and_body()
    if not headers.get("retry-after"):
        return "no Retry-After"
    try:
        code = json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return "not our error shape"
    return None if code == "overloaded" else f"code {code}"


def refusal_limit(answer: Answer) -> str:
    """Which limit refused it: the connections' (at the HTTP layer) or the requests' (at the edge)."""
    _, body = answer.head_and_body()
    return "max_connections" if b"connections" in body else "max_requests"


async def _all_begun(answers: list[Answer], tasks: list[asyncio.Task[Answer]]) -> None:
    while not all(a.first or t.done() for a, t in zip(answers, tasks, strict=True)):
        await asyncio.sleep(0.05)


async def drive(gateway: targets.Target, plan: Plan, timeout: float, arriving: int) -> dict[str, Any]:
    """The streams; once all have begun, the first wave past the limits; once that has begun or been answered, the
    second, sent to workers the first left full or nearly (its refusals wait behind no admitted request)."""
    parts = urlsplit(gateway.base)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    from bench.load import request_body

    body = request_body(targets.PRICED_MODEL, "stream")
    request = http_request(host, port, targets.CHAT_PATH, body, gateway.headers)
    gate = asyncio.Semaphore(arriving)
    t0 = time.perf_counter()
    begun, waves, tasks = [], [], []
    for size in (plan.streams, *plan.waves):
        answers = [Answer() for _ in range(size)]
        sent = [asyncio.create_task(one(host, port, request, gate, timeout, a)) for a in answers]
        await _all_begun(answers, sent)
        begun.append(time.perf_counter())
        waves.append(answers)
        tasks += sent
    await asyncio.gather(*tasks)
    return {"t0": t0, "t_begun": begun[0], "t_end": time.perf_counter(), "streams": waves[0], "waves": waves[1:]}


# --- the money -----------------------------------------------------------------------------------------------

def _get(gateway: targets.Target, path: str) -> Any:
    status, body = http_get(gateway.base + path, gateway.headers)
    if status != 200:
        raise RuntimeError(f"GET {path}: {status} {body[:300]!r}")
    return json.loads(body)


def _usage(gateway: targets.Target) -> tuple[int, Decimal]:
    doc = _get(gateway, "/v1/usage?group_by=model")
    rows = [r for r in doc["data"] if r.get("model") == targets.PRICED_MODEL]
    return sum(r["requests"] for r in rows), sum((Decimal(r["cost"]) for r in rows), Decimal(0))


def _decisions(gateway: targets.Target) -> tuple[int, Decimal, dict[str, int]]:
    count, cost, outcomes, cursor = 0, Decimal(0), dict[str, int](), None
    while True:
        path = f"/v1/route/decisions?model={quote(targets.PRICED_MODEL, safe='')}&limit=100"
        page = _get(gateway, path + (f"&cursor={quote(cursor, safe='')}" if cursor else ""))
        for d in page["data"]:
            count += 1
            cost += Decimal(d["cost"] or 0)
            outcomes[d["outcome"]] = outcomes.get(d["outcome"], 0) + 1
        cursor = page["next_cursor"]
        if not page["has_more"] or not cursor:
            return count, cost, outcomes


def money(gateway: targets.Target, answered: int, wait: float) -> dict[str, Any]:
    """Wait up to `wait` s for the writer to flush, then the key's spend, the decisions' and usage's counts and
    costs against what `answered` streams cost."""
    expected = answered * unit_cost()
    deadline = time.monotonic() + wait
    while True:
        spend = Decimal(_get(gateway, "/v1/key")["spend"]["total"])
        usage_requests, usage_cost = _usage(gateway)
        if (usage_requests == answered and spend == expected) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    count, cost, outcomes = _decisions(gateway)
    out = {"expected_cost": str(expected), "key_spend": str(spend), "decisions": count,
           "decisions_cost": str(cost), "decision_outcomes": outcomes, "usage_requests": usage_requests,
           "usage_cost": str(usage_cost)}
    out["exact"] = (spend == cost == usage_cost == expected and count == usage_requests == answered
                    and outcomes == {"ok": answered})
    return out


# --- the run ---------------------------------------------------------------------------------------------------

def _ms(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    v = sorted(values)

    def pick(q: float) -> float:
        return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]

    return {"p50": round(pick(0.5) * 1000, 1), "p90": round(pick(0.9) * 1000, 1), "p99": round(pick(0.99) * 1000, 1),
            "max": round(v[-1] * 1000, 1), "mean": round(statistics.fmean(v) * 1000, 1)}


def _count(problems: list[str | None]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in problems:
        if p:
            out[p] = out.get(p, 0) + 1
    return out


def _wave(answers: list[Answer], text: str, first_stream_end: float) -> dict[str, Any]:
    """A wave past the limits: its refusals (checked, timed from request written to answer read, and whether each
    came before the first admitted stream ended) and its admitted streams (checked like the others)."""
    refused = [a for a in answers if a.status == 503]
    admitted_problems = [stream_problem(a, text) for a in answers if a.status != 503]
    return {"sent": len(answers), "refused": len(refused), "admitted": len(admitted_problems),
            "admitted_complete": admitted_problems.count(None),
            "problems": _count(admitted_problems + [refusal_problem(a) for a in refused]),
            "refused_by": _count([refusal_limit(a) for a in refused]),
            "refusal_ms": _ms([a.ended - a.sent for a in refused]),
            "refusals_after_a_stream_ended": sum(a.ended >= first_stream_end for a in refused)}


def summarise(plan: Plan, run: dict[str, Any], rss: RssSampler, idle_mb: float, started_s: float) -> dict[str, Any]:
    streams: list[Answer] = run["streams"]
    text = stream_text(plan.chunks)
    stream_problems = [stream_problem(a, text) for a in streams]
    ok = [a for a, p in zip(streams, stream_problems, strict=True) if p is None]
    first_stream_end = min((a.ended for a in ok), default=math.inf)
    waves = [_wave(w, text, first_stream_end) for w in run["waves"]]
    peak_streams = rss.peak(run["t0"], run["t_begun"])
    return {
        "plan": plan.__dict__ | {"stream_seconds": plan.stream_seconds},
        "gateway_start_s": round(started_s, 1),
        "streams": {"sent": len(streams), "complete": len(ok), "problems": _count(stream_problems),
                    "all_open_at_once": bool(ok) and max(a.first for a in ok) < first_stream_end,
                    "all_begun_s": round(run["t_begun"] - run["t0"], 1),
                    "first_event_ms": _ms([a.first - a.sent for a in streams if a.first and a.sent]),
                    "duration_ms": _ms([a.ended - a.sent for a in ok])},
        "waves": waves,
        "minimum_refusals": max(0, plan.streams + sum(plan.waves) - plan.workers * plan.max_requests),
        "rss_mb": {"idle": round(idle_mb, 1), "peak_streams": round(peak_streams, 1),
                   "peak_overall": round(rss.peak(), 1),
                   "per_stream_kb": round((peak_streams - idle_mb) * 1024 / max(1, plan.streams), 1),
                   "processes": max((n for _, _, n in rss.samples), default=0)},
        "answered": len(ok) + sum(w["admitted_complete"] for w in waves),
        "wall_s": round(run["t_end"] - run["t0"], 1),
    }


def verdict(result: dict[str, Any], rss_limit_mb: float) -> list[str]:
    """The checks that failed, in words (empty: all hold)."""
    s, m, waves = result["streams"], result["money"], result["waves"]
    failed = []
    if s["complete"] != s["sent"]:
        failed.append(f"{s['sent'] - s['complete']} of {s['sent']} streams did not complete: {s['problems']}")
    if not s["all_open_at_once"]:
        failed.append("a stream ended before the last one began: make them longer (--chunks, --chunk-delay)")
    for i, w in enumerate(waves, 1):
        if w["problems"]:
            failed.append(f"wave {i} past the limits: answers neither a proper refusal nor a whole stream: "
                          f"{w['problems']}")
        if w["refusals_after_a_stream_ended"]:
            failed.append(f"wave {i}: {w['refusals_after_a_stream_ended']} refusals came after a stream had ended")
    admitted = s["sent"] + sum(w["admitted"] for w in waves)
    capacity = result["plan"]["workers"] * result["plan"]["max_requests"]
    if admitted > capacity:
        failed.append(f"{admitted} requests admitted, more than the workers' {capacity} (max_requests each)")
    refused = sum(w["refused"] for w in waves)
    if refused < result["minimum_refusals"]:
        failed.append(f"{refused} refusals, fewer than the {result['minimum_refusals']} the limits must make")
    if not m["exact"]:
        failed.append(f"the money is not exact: {m}")
    if result["rss_mb"]["peak_streams"] > rss_limit_mb:
        failed.append(f"peak RSS {result['rss_mb']['peak_streams']} MB over {rss_limit_mb:g} MB")
    return failed


def report(result: dict[str, Any]) -> str:
    s, m, r, p = result["streams"], result["money"], result["rss_mb"], result["plan"]
    first = s["first_event_ms"]
    lines = [
        (f"scale: {p['streams']} streams of {p['chunks']} events {p['delay']:g} s apart, {p['workers']} workers "
         f"(max_requests {p['max_requests']}, max_connections {p['max_connections']} each), PostgreSQL, priced"),
        (f"  streams complete    {s['complete']} / {s['sent']}  (all open at once: {s['all_open_at_once']}; all "
         f"begun after {s['all_begun_s']} s; first event p50 {first.get('p50')} ms, p99 {first.get('p99')} ms)"
         + (f"  problems: {s['problems']}" if s["problems"] else "")),
        (f"  RSS (gateway, {r['processes']} processes)  idle {r['idle']} MB, peak with the streams "
         f"{r['peak_streams']} MB ({r['per_stream_kb']} KB a stream), peak overall {r['peak_overall']} MB"),
        (f"  money               {'exact' if m['exact'] else 'NOT EXACT'}: key spend {m['key_spend']}, decisions "
         f"{m['decisions']} costing {m['decisions_cost']}, usage {m['usage_requests']} costing {m['usage_cost']}; "
         f"expected {result['answered']} x {unit_cost()} = {m['expected_cost']}"),
    ]
    for i, w in enumerate(result["waves"], 1):
        lines.append(f"  past the limits, wave {i}: {w['sent']} sent, {w['refused']} refused {w['refused_by']}, "
                     f"{w['admitted']} admitted ({w['admitted_complete']} complete); "
                     f"{w['refusals_after_a_stream_ended']} refusals after a stream's end")
        lines.append(f"    refusal latency ms {w['refusal_ms']}")
    lines.append(f"  at least {result['minimum_refusals']} refusals due; wall {result['wall_s']} s "
                 f"(gateway start {result['gateway_start_s']} s)")
    if "loadavg" in result:
        load = result["loadavg"]
        lines.append(f"  load average {load['before']:.1f} before, {load['after']:.1f} after ({load['cpus']} cpus)")
    return "\n".join(lines)


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    plan = plan_for(args)
    load_before = os.getloadavg()[0]
    limit = raise_open_files()
    sockets = plan.streams + sum(plan.waves)
    if limit < sockets + 100:
        raise StartError(f"the open-files limit ({limit}) cannot hold {sockets} sockets")
    slow = ("--stream-chunks", str(plan.chunks), "--chunk-delay", f"{plan.delay:g}")
    upstream = targets.start_upstream(workdir, None, slow)
    store_url = targets.create_database(args.pg_url)
    timeout = plan.stream_seconds + args.timeout
    # Every admitted stream holds an upstream connection for its whole life, which may be longer than the default
    # 300 s: the pool and the whole-call timeout are sized to the run.
    settings = {"server": {"workers": plan.workers, "max_requests": plan.max_requests,
                           "max_connections": plan.max_connections},
                "upstreams": {"fake": {"pool": {"max_connections": plan.max_requests},
                                       "timeouts": {"total": math.ceil(timeout)}}}}
    t = time.perf_counter()
    gateway = targets.start_specway(workdir, upstream, args.log_level, "specway-scale", store_url=store_url,
                                    settings=settings)
    started_s = time.perf_counter() - t
    rss = RssSampler(gateway.proc.pid)
    time.sleep(1.0)
    idle_mb, _ = rss.read()
    rss.start()
    try:
        driven = asyncio.run(drive(gateway, plan, timeout, args.arriving))
    finally:
        rss.stopped.set()
    result = summarise(plan, driven, rss, idle_mb, started_s)
    result["money"] = money(gateway, result["answered"], args.settle_seconds)
    result["failed"] = verdict(result, args.rss_limit_mb)
    result["loadavg"] = {"before": load_before, "after": os.getloadavg()[0], "cpus": os.cpu_count()}
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=10_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--chunks", type=int, default=30, help="content events of a stream (default 30)")
    p.add_argument("--chunk-delay", type=float, default=2.0, help="seconds between them (default 2)")
    p.add_argument("--headroom", type=float, default=1.2,
                   help="server.max_requests per worker as a multiple of its share of the streams (default 1.2: the "
                        "workers do not take exactly half the connections each)")
    p.add_argument("--overflow", type=int, default=None, help="requests sent past the limits (default: see above)")
    p.add_argument("--arriving", type=int, default=256,
                   help="requests at once between connecting and their answer's first byte (default 256)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds a stream may take beyond its length")
    p.add_argument("--settle-seconds", type=float, default=60.0, help="how long to wait for the bookkeeping")
    p.add_argument("--rss-limit-mb", type=float, default=1024.0)
    p.add_argument("--pg-url", default=targets.PG_ADMIN_URL, help="where to create the run's database")
    p.add_argument("--log-level", default="warning")
    p.add_argument("--json", help="also write the result to this file")
    p.add_argument("--keep", action="store_true", help="keep the work dir (configs, logs)")
    return p.parse_args(argv)


def _on_sigterm(_signum: int, _frame: Any) -> None:
    raise SystemExit(143)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    workdir = Path(tempfile.mkdtemp(prefix="specway-scale-"))
    try:
        result = run(args, workdir)
    except (StartError, RuntimeError) as exc:
        print(f"bench.scale: {exc}", file=sys.stderr)
        return 1
    finally:
        stop_all()
        targets.drop_databases()
        if args.keep:
            print(f"kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(report(result))
    for line in result["failed"]:
        print(f"FAILED: {line}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
    sys.exit(130)
