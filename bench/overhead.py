"""What Connexion and our edge cost on a trivial operation: GET /healthz through the gateway against the same
answer from a plain Starlette app, both on uvicorn (uvloop, httptools, one worker), measured with wrk in one run.

    python -m bench.overhead [--seconds 5] [--conns 32] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.procs import Proc, free_port, http_ok, loopback_env, stop_all, wait_until
from bench.targets import REPO, specway_command

PLAIN = """
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

async def healthz(request):
    return Response(b'{"status":"ok"}', media_type="application/json")

app = Starlette(routes=[Route("/healthz", healthz)])
"""


def _wrk(url: str, conns: int, seconds: float) -> float:
    out = subprocess.run(["wrk", "-t1", f"-c{conns}", f"-d{seconds:g}s", url], capture_output=True, text=True,
                         timeout=seconds + 30, check=True).stdout
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if match is None:
        raise RuntimeError(f"wrk printed no rate:\n{out}")
    return float(match[1])


def _start(workdir: Path) -> tuple[str, str]:
    gw_port, plain_port = free_port(), free_port()
    config = workdir / "specway.yaml"
    config.write_text(json.dumps({"server": {"log_level": "warning"},
                                  "store": {"url": f"sqlite:///{workdir / 'specway.db'}"}}))
    gateway = Proc("specway", [*specway_command(), "--config", str(config), "serve", "--port", str(gw_port)], workdir,
                   cwd=REPO, env=loopback_env())
    (workdir / "plain_app.py").write_text(PLAIN)
    plain = Proc("starlette", [sys.executable, "-m", "uvicorn", "plain_app:app", "--port", str(plain_port),
                               "--loop", "uvloop", "--http", "httptools", "--log-level", "warning", "--no-access-log"],
                 workdir, cwd=workdir, env=loopback_env())
    urls = f"http://127.0.0.1:{gw_port}/healthz", f"http://127.0.0.1:{plain_port}/healthz"
    wait_until(gateway, lambda: http_ok(urls[0]), 60, "answering /healthz")
    wait_until(plain, lambda: http_ok(urls[1]), 60, "answering /healthz")
    return urls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--conns", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        print("bench.overhead needs wrk (apt-get install -y wrk)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="specway-overhead-") as tmp:
        try:
            gateway, plain = _start(Path(tmp))
            rates: dict[str, list[float]] = {"specway": [], "starlette": []}
            for _ in range(args.repeat):  # interleaved, so both see the same machine
                rates["specway"].append(_wrk(gateway, args.conns, args.seconds))
                rates["starlette"].append(_wrk(plain, args.conns, args.seconds))
        finally:
            stop_all()
    gw, st = statistics.median(rates["specway"]), statistics.median(rates["starlette"])
    print(f"GET /healthz, {args.conns} connections, median of {args.repeat} x {args.seconds:g} s")
    print(f"  specway (Connexion + edge): {gw:9.0f} req/s   {1000 / gw:.3f} ms/request")
    print(f"  plain Starlette:            {st:9.0f} req/s   {1000 / st:.3f} ms/request")
    print(f"  ratio {gw / st:.2f}; the gateway's routing/middleware costs {1000 / gw - 1000 / st:.3f} ms a request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
