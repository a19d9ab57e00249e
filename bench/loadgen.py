"""The built-in load generator, used when wrk is not installed: raw asyncio sockets, HTTP/1.1 keep-alive.

    python -m bench.loadgen --url http://127.0.0.1:8080/v1/chat/completions --conns 32 --seconds 10 \\
        --body-file body.json --header "Authorization: Bearer sk-..."

Each connection sends one request, reads the whole answer (Content-Length or chunked), records the latency and the
time to the answer's first body chunk (for an SSE stream: its first event), and repeats until the time is up. Prints `BENCH_JSON {...}` in the same shape as the wrk script's done(). It is slower
than wrk and shares the machine's two cores with the gateway, so compare only ratios measured with the same loader.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any
from urllib.parse import urlsplit

_MARK = "BENCH_JSON "


class _Stats:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.firsts: list[float] = []  # seconds from the request's write to the first chunk of its body
        self.errors = {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bool, float]:
    """Read one whole response; (status, keep-alive, perf_counter when the body's first chunk had come)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip().lower()
    first = 0.0
    if "chunked" in headers.get("transfer-encoding", ""):
        while True:
            size = int((await reader.readline()).split(b";", 1)[0], 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b""):
                    pass
                break
            await reader.readexactly(size + 2)
            first = first or time.perf_counter()
    elif "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    else:
        await reader.read()  # until close
        return status, False, time.perf_counter()
    return status, headers.get("connection") != "close", first or time.perf_counter()


async def _connection(host: str, port: int, request: bytes, deadline: float, stats: _Stats, timeout: float) -> None:
    reader = writer = None
    while time.perf_counter() < deadline:
        if writer is None:
            try:
                reader, writer = await asyncio.open_connection(host, port)
            except OSError:
                stats.errors["connect"] += 1
                await asyncio.sleep(0.05)
                continue
        assert reader is not None
        start = time.perf_counter()
        try:
            writer.write(request)
            status, keep, first = await asyncio.wait_for(_read_answer(reader), timeout)
        except TimeoutError:
            stats.errors["timeout"] += 1
            keep = False
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
            stats.errors["read"] += 1
            keep = False
        else:
            stats.latencies.append(time.perf_counter() - start)
            stats.firsts.append(first - start)
            if not 200 <= status < 400:
                stats.errors["status"] += 1
        if not keep:
            writer.close()
            writer = None
    if writer is not None:
        writer.close()


def _percentile(sorted_values: list[float], pct: float) -> float:
    if not sorted_values:
        return 0.0
    rank = max(0, min(len(sorted_values) - 1, round(pct / 100 * len(sorted_values)) - 1))
    return sorted_values[rank]


async def run(url: str, conns: int, seconds: float, body: bytes, headers: list[str], timeout: float) -> dict[str, Any]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    head = [f"POST {parts.path or '/'} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json",
            f"Content-Length: {len(body)}", *headers]
    request = ("\r\n".join(head) + "\r\n\r\n").encode() + body
    stats = _Stats()
    start = time.perf_counter()
    deadline = start + seconds
    await asyncio.gather(*(_connection(host, port, request, deadline, stats, timeout) for _ in range(conns)))
    elapsed = time.perf_counter() - start
    lat, firsts = sorted(stats.latencies), sorted(stats.firsts)
    return {"requests": len(lat), "duration_us": elapsed * 1e6,
            "p50_us": _percentile(lat, 50) * 1e6, "p90_us": _percentile(lat, 90) * 1e6,
            "p99_us": _percentile(lat, 99) * 1e6, "first_p50_us": _percentile(firsts, 50) * 1e6,
            "first_p99_us": _percentile(firsts, 99) * 1e6, "errors": stats.errors}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.loadgen", description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--conns", type=int, default=1)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--body-file", required=True)
    p.add_argument("--header", action="append", default=[], help="'Name: value', repeatable")
    p.add_argument("--timeout", type=float, default=30.0, help="per request, seconds")
    args = p.parse_args(argv)
    with open(args.body_file, "rb") as f:
        body = f.read()
    try:
        import uvloop

        factory: Any = uvloop.new_event_loop
    except ImportError:  # pragma: no cover
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        result = runner.run(run(args.url, args.conns, args.seconds, body, args.header, args.timeout))
    print(_MARK + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
