"""python -m bench: Specway vs the same fake upstream called directly, vs two minimal relays (the ceilings) and vs
LiteLLM when installed, as ratios.

Starts the fast fake upstream, the httpx and aiohttp ceiling relays, `specway serve` (1 worker; one gateway per store
the chosen scenarios need: a fresh SQLite store, and a fresh PostgreSQL database for priced-postgres) and, if found,
the LiteLLM proxy; checks one answer of each kind from each; warms them up; then, for every scenario x connections
cell, loads the direct upstream, the ceilings, the scenario's gateway and LiteLLM back to back (so the ratios compare
neighbours in time on a noisy machine). Prints one table and, with --json, writes it with the raw samples. Every
process it starts is stopped on exit, and the PostgreSQL database it created is dropped.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import load, report, targets
from bench.procs import StartError, cpu_seconds, rss_mb, stop_all


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=10.0, help="seconds of load per cell (default 10)")
    p.add_argument("--quick", action="store_true", help="3 s per cell, 1 s warm-up")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of unmeasured load per target and scenario")
    p.add_argument("--conns", default="1,32", help="comma-separated connection counts (default 1,32)")
    p.add_argument("--scenarios", default=",".join(load.DEFAULT_SCENARIOS),
                   help=f"comma-separated, of {','.join(load.SCENARIOS)} (default json,stream)")
    p.add_argument("--repeat", type=int, default=1, help="run every cell N times; the table shows medians")
    p.add_argument("--json", metavar="FILE", help="also write the table and raw samples as JSON")
    p.add_argument("--loadgen", choices=["auto", "wrk", "builtin"], default="auto",
                   help="auto: wrk when on PATH, else the built-in asyncio loader; streams always on the built-in one "
                        "(it times the first event)")
    p.add_argument("--litellm", metavar="PATH", help="litellm executable or venv (default: PATH, /tmp/litellm-venv)")
    p.add_argument("--no-litellm", action="store_true", help="skip the peer even when installed")
    p.add_argument("--no-ceilings", action="store_true", help="skip the httpx and aiohttp ceiling relays")
    p.add_argument("--pg-url", default=targets.PG_ADMIN_URL,
                   help="PostgreSQL admin URL for priced-postgres's fresh database (default $SPECWAY_BENCH_PG_URL "
                        "or postgresql://postgres@127.0.0.1:5432/postgres)")
    p.add_argument("--litellm-dir", type=Path, default=targets.PEER_DIR, help="the peer's config.yaml and env.sh")
    p.add_argument("--litellm-timeout", type=float, default=180.0, help="seconds to wait for LiteLLM to start")
    p.add_argument("--upstream-port", type=int, help="fake upstream port (default 18000 when free, else any)")
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                   help="the gateway's log level (default warning: no per-request access log)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (configs, logs, SQLite store)")
    p.add_argument("--baseline", metavar="REV", help="also run the gateway of this git revision (A/B, interleaved)")
    args = p.parse_args(argv)
    if args.quick:
        args.duration, args.warmup = 3.0, 1.0
    args.conns = sorted({int(c) for c in args.conns.split(",") if c.strip()})
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = set(args.scenarios) - set(load.SCENARIOS)
    if unknown or not args.conns or min(args.conns) < 1 or args.duration <= 0 or args.repeat < 1:
        p.error(f"bad --scenarios/--conns/--duration/--repeat (unknown scenarios: {sorted(unknown)})")
    return args


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _loadgen(choice: str) -> str:
    if choice == "wrk" and not load.have_wrk():
        raise StartError("--loadgen wrk: wrk is not on PATH (apt-get install -y wrk)")
    if choice == "auto":
        return "wrk" if load.have_wrk() else "builtin"
    return choice


def _start(args: argparse.Namespace, workdir: Path) -> tuple[list[targets.Target], str]:
    """The targets to load, direct first; and a note about the peer."""
    upstream = targets.start_upstream(workdir, args.upstream_port)
    _say(f"fake upstream: {upstream.base} (pid {upstream.proc.pid})")
    found = [upstream]
    for which in () if args.no_ceilings else targets.CEILINGS:
        ceiling = targets.start_ceiling(workdir, upstream, which)
        _say(f"{ceiling.name}: {ceiling.base} (pid {ceiling.proc.pid})")
        found.append(ceiling)
    stores = {load.SCENARIOS[sc].store for sc in args.scenarios}
    if "sqlite" in stores:
        found.append(targets.start_specway(workdir, upstream, args.log_level))
    if "postgres" in stores:
        url = targets.create_database(args.pg_url)
        found.append(targets.start_specway(workdir, upstream, args.log_level, "specway-pg", store_url=url))
    for t in found[-len(stores):]:
        _say(f"{t.name}: {t.base} (pid {t.proc.pid})")
    if args.baseline and "sqlite" in stores:
        tree = targets.checkout(args.baseline, workdir)
        baseline = targets.start_specway(workdir, upstream, args.log_level, "baseline", tree)
        _say(f"baseline ({args.baseline}): {baseline.base} (pid {baseline.proc.pid})")
        found.append(baseline)
    if args.no_litellm:
        return found, "LiteLLM skipped (--no-litellm)"
    exe = targets.find_litellm(args.litellm)
    if exe is None:
        return found, "LiteLLM not installed (no litellm on PATH, none in /tmp/litellm-venv, no --litellm)"
    if not (args.litellm_dir / "config.yaml").is_file():
        return found, f"LiteLLM skipped: no {args.litellm_dir / 'config.yaml'}"
    _say(f"litellm: starting {exe} (can take ~15 s)")
    try:
        peer = targets.start_litellm(workdir, exe, upstream, args.litellm_dir, args.litellm_timeout)
    except StartError as exc:
        if args.litellm:
            raise
        _say(f"litellm did not start; going on without it: {exc}")
        return found, "LiteLLM found but did not start (see stderr)"
    _say(f"litellm: {peer.base} (pid {peer.proc.pid})")
    return [*found, peer], f"LiteLLM: {exe}"


def _measure(args: argparse.Namespace, tgts: list[targets.Target], loadgen: str,
             workdir: Path) -> list[report.Sample]:
    for sc in args.scenarios:
        for t, body, _ in load.plan(sc, tgts):
            load.check(t, body)
    if args.warmup > 0:
        for sc in args.scenarios:
            for t, body, _ in load.plan(sc, tgts):
                load.run_cell(t, body, max(args.conns), args.warmup, load.loader_for(sc, args.loadgen, loadgen), workdir)
    samples = []
    cells = [(sc, c, i % 2 == 1) for i in range(args.repeat) for sc in args.scenarios for c in args.conns]
    total, n = sum(len(load.plan(sc, tgts)) for sc, _, _ in cells), 0
    for sc, conns, flip in cells:  # the baseline's loads first every other repeat
        for t, body, row in load.plan(sc, tgts, flip):  # neighbours in time: direct, ceilings, gateways, peer
            n += 1
            cpu0 = cpu_seconds(t.proc.pid)
            cell = load.run_cell(t, body, conns, args.duration, load.loader_for(sc, args.loadgen, loadgen), workdir)
            sample = report.Sample(row, sc, conns, cell, cpu_seconds(t.proc.pid) - cpu0, rss_mb(t.proc.pid))
            samples.append(sample)
            _say(f"[{n}/{total}] {row:15} {sc:15} c={conns:<3} {cell.rps:9.0f} req/s  p50 {cell.p50_ms:7.2f} ms  "
                 f"p99 {cell.p99_ms:7.2f} ms  errors {cell.errors}")
    return samples


def _meta(args: argparse.Namespace, loadgen: str, note: str, load_before: tuple[float, ...]) -> dict[str, Any]:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=targets.REPO, capture_output=True,
                                text=True, timeout=10, check=False).stdout.strip()
    except OSError:
        commit = ""
    return {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "commit": commit, "cpus": os.cpu_count(),
        "python": platform.python_version(), "loadgen": loadgen, "duration_s": args.duration, "warmup_s": args.warmup,
        "repeat": args.repeat, "conns": args.conns, "scenarios": args.scenarios, "gateway_log_level": args.log_level,
        "peer": note, "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
    }


def _on_sigterm(_signum: int, _frame: Any) -> None:
    raise SystemExit(143)  # unwinds through the finally that stops every process


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    workdir = Path(tempfile.mkdtemp(prefix="specway-bench-"))
    load_before = os.getloadavg()
    try:
        loadgen = _loadgen(args.loadgen)
        _say(f"load generator: {'wrk' if loadgen == 'wrk' else 'built-in asyncio loader (wrk not found)'}; "
             f"{args.duration:g} s per cell; work dir {workdir}")
        tgts, note = _start(args, workdir)
        samples = _measure(args, tgts, loadgen, workdir)
    except (StartError, RuntimeError, subprocess.TimeoutExpired) as exc:
        _say(f"bench: {exc}")
        return 1
    except KeyboardInterrupt:
        _say("bench: interrupted; stopping what it started")
        return 130
    except SystemExit:
        _say("bench: terminated; stopping what it started")
        raise
    finally:
        stop_all()
        targets.drop_databases()
        if args.keep:
            _say(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    rows = report.rows(samples)
    meta = _meta(args, loadgen, note, load_before)
    print(report.table(rows))
    streams = " (streams: built-in, for the first event's time)" if args.loadgen == "auto" and loadgen == "wrk" else ""
    print(f"\nload generator: {loadgen}{streams}; {args.duration:g} s per cell x {args.repeat}; {note}; "
          f"loadavg before {load_before[0]:.2f}, after {meta['loadavg_after'][0]:.2f} ({os.cpu_count()} cpus)")
    if args.json:
        report.write_json(Path(args.json), meta, rows, samples)
        print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
