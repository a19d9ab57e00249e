"""Soak: a gateway's memory under steady load, window after window, and whether it levels off.

    python -m bench.soak --scenarios json,stream,priced-sqlite --windows 12 --window 10 --json soak.json

Starts the fake upstream and one gateway (as `python -m bench` does: one worker, a fresh SQLite store), then loads it
with each scenario in turn: --warmup seconds unmeasured, then --windows windows of --window seconds, the gateway's
RSS (VmRSS of its process tree) read after each. A gateway that keeps something of every request grows by that much
per request in every window for as long as the load lasts; one that only warms up (allocator arenas, SQLite's page
cache, the label sets and statements it caches) grows in a step now and then, and less and less. The verdict, per
scenario: over the last half of its windows, the median of each window's RSS growth per request served in it is at
most --max-bytes-per-request. Exit status 0 when every scenario holds. Not a test of speed: the request rates are
reported, never judged.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import load, targets
from bench.procs import rss_mb, stop_all

MB = 1024 * 1024


@dataclass(frozen=True)
class Window:
    requests: int  # answered in the window
    errors: int
    rss_mb: float  # after it


def growth_per_request(windows: list[Window]) -> float:
    """The median, over the last half of `windows`, of what the RSS grew in a window per request served in it (a
    window that shrank counts 0). A gateway that keeps something of every request grows in every window; one that
    warms up grows in a step now and then, which the median passes over."""
    half = len(windows) // 2
    if half < 1:
        raise ValueError("the verdict needs at least two windows")
    grown = [max(0.0, now.rss_mb - before.rss_mb) * MB / max(1, now.requests)
             for before, now in zip(windows[half - 1:-1], windows[half:], strict=True)]
    return statistics.median(grown)


def soak(gateway: targets.Target, scenario: str, args: argparse.Namespace, workdir: Path) -> list[Window]:
    loader = load.loader_for(scenario, args.loadgen, "wrk" if load.have_wrk() else "builtin")
    load.check(gateway, scenario)
    load.run_cell(gateway, scenario, args.conns, args.warmup, loader, workdir)
    windows = []
    for n in range(1, args.windows + 1):
        cell = load.run_cell(gateway, scenario, args.conns, args.window, loader, workdir)
        windows.append(Window(cell.requests, cell.errors, rss_mb(gateway.proc.pid)))
        print(f"{scenario:15} window {n:2}/{args.windows}  {cell.rps:8.0f} req/s  errors {cell.errors}  "
              f"RSS {windows[-1].rss_mb:7.1f} MB", file=sys.stderr, flush=True)
    return windows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="json,stream,priced-sqlite",
                    help="comma-separated, of the SQLite ones of python -m bench (default json,stream,priced-sqlite)")
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--windows", type=int, default=12, help="measured windows per scenario (default 12)")
    ap.add_argument("--window", type=float, default=10.0, help="seconds a window (default 10)")
    ap.add_argument("--warmup", type=float, default=10.0, help="unmeasured seconds per scenario (default 10)")
    ap.add_argument("--max-bytes-per-request", type=float, default=200.0,
                    help="the most the RSS may grow per request, the median window of the last half (default 200)")
    ap.add_argument("--loadgen", choices=["auto", "wrk", "builtin"], default="auto",
                    help="auto: wrk when on PATH (streams on the built-in loader), else the built-in loader")
    ap.add_argument("--json", metavar="FILE", help="also write the windows and verdicts as JSON")
    args = ap.parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in scenarios if s not in load.SCENARIOS or load.SCENARIOS[s].store != "sqlite"]
    if unknown or args.windows < 2:
        ap.error(f"unknown or non-SQLite scenarios: {unknown}" if unknown else "--windows must be at least 2")
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="specway-soak-") as tmp:
        workdir = Path(tmp)
        try:
            upstream = targets.start_upstream(workdir, None)
            gateway = targets.start_specway(workdir, upstream, "warning")
            started = rss_mb(gateway.proc.pid)
            for scenario in scenarios:
                windows = soak(gateway, scenario, args, workdir)
                grew = growth_per_request(windows)
                results[scenario] = {"windows": [asdict(w) for w in windows], "bytes_per_request": round(grew, 1),
                                     "holds": grew <= args.max_bytes_per_request}
        finally:
            stop_all()
    print(f"RSS at start {started:.1f} MB; growth per request in the median window of the last half of each "
          f"scenario's (at most {args.max_bytes_per_request:g} bytes):")
    for scenario, r in results.items():
        windows = r["windows"]
        assert isinstance(windows, list)
        print(f"  {scenario:15} {r['bytes_per_request']:8.1f} bytes/request  RSS {windows[0]['rss_mb']:.1f} -> "
              f"{windows[-1]['rss_mb']:.1f} MB over {sum(w['requests'] for w in windows)} requests  "
              f"{'holds' if r['holds'] else 'GROWS'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rss_start_mb": started, "limit": args.max_bytes_per_request,
                                               "scenarios": results}, indent=2) + "\n")
    return 0 if all(r["holds"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
