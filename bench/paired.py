"""Paired runs: the CPU a gateway's threads spend per request, for two or more source trees loaded in turn.

    .venv/bin/python -m bench.paired --scenario json --conns 32 --rounds 6 new=HEAD old=125125d

Each NAME=TREE is a gateway on one fake upstream. TREE is HEAD (this working tree), a git revision (unpacked with
`git archive`), a directory holding a source tree (a variant: a copy with one change), or `ceiling` (the httpx
ceiling). Round after round each is loaded with wrk for --seconds, in turn (the order reversed every other round),
and the CPU time of its process's threads is read from /proc around the run: the event loop's (the main thread) and
the others' (SQLite's, ...). Printed per round and as medians of the rounds.

A whole interleaved `python -m bench` moves by ±5 % between runs on a shared 2-core machine; a change's direct cost is
better seen here, per request, in rounds of the same trees side by side (bench/README.md's variant runs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from bench.load import SCENARIOS, CellResult, have_wrk, run_cell
from bench.procs import CLK_TCK, StartError, process_tree, stop_all
from bench.targets import (
    REPO,
    Target,
    checkout,
    create_database,
    drop_databases,
    start_ceiling,
    start_specway,
    start_upstream,
)


def thread_cpu(pid: int) -> Counter[str]:
    """CPU seconds of the threads of `pid`'s processes: `loop` for each process's main thread, `threads` the rest."""
    seconds: Counter[str] = Counter()
    for proc in process_tree(pid):
        try:
            tids = os.listdir(f"/proc/{proc}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                stat = Path(f"/proc/{proc}/task/{tid}/stat").read_text()
            except OSError:
                continue  # the thread ended meanwhile
            fields = stat.rsplit(")", 1)[1].split()
            seconds["loop" if tid == str(proc) else "threads"] += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return seconds


def variant(text: str) -> tuple[str, str]:
    name, sep, tree = text.partition("=")
    if not sep or not name or not tree:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=TREE (HEAD, a git revision, a directory, ceiling)")
    return name, tree


def start(name: str, tree: str, workdir: Path, upstream: Target, postgres: bool) -> Target:
    if tree == "ceiling":
        return start_ceiling(workdir, upstream, "httpx")
    source = REPO if tree == "HEAD" else Path(tree) if Path(tree).is_dir() else checkout(tree, workdir)
    return start_specway(workdir, upstream, "warning", name=name, tree=source,
                         store_url=create_database() if postgres else None)


def measure(target: Target, scenario: str, conns: int, seconds: float, workdir: Path, loadgen: str = "wrk"
            ) -> dict[str, float]:
    """One run: req/s, p50 and p99 (ms), and CPU µs per answered request by thread kind, `all` their sum."""
    before = thread_cpu(target.proc.pid)
    cell: CellResult = run_cell(target, scenario, conns, seconds, loadgen, workdir)
    after = thread_cpu(target.proc.pid)
    per = {kind: (after[kind] - before[kind]) / max(cell.requests, 1) * 1e6 for kind in ("loop", "threads")}
    return {"req/s": cell.rps, "p50": cell.p50_ms, "p99": cell.p99_ms, **per, "all": sum(per.values()),
            "errors": cell.errors}


def run(variants: list[tuple[str, str]], scenario: str, conns: int, seconds: float, rounds: int, warmup: float,
        loadgen: str, workdir: Path) -> dict[str, list[dict[str, float]]]:
    """Every round's measures of each variant, printed as they come."""
    upstream = start_upstream(workdir, None)
    postgres = SCENARIOS[scenario].store == "postgres"
    targets = {name: start(name, tree, workdir, upstream, postgres) for name, tree in variants}
    for target in targets.values():
        run_cell(target, scenario, conns, warmup, loadgen, workdir)
    print(f"{scenario}, {conns} connections, {seconds:g} s a run ({loadgen}); CPU in µs per request\n{_HEADER}")
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
    for rnd in range(rounds):
        order = list(targets.items())
        for name, target in order if rnd % 2 == 0 else reversed(order):
            rows[name].append(measure(target, scenario, conns, seconds, workdir, loadgen))
            print(_line(f"{rnd + 1}:{name}", rows[name][-1]), flush=True)
    return rows


_COLUMNS = {"req/s": 0, "p50": 2, "p99": 2, "loop": 0, "threads": 0, "all": 0, "errors": 0}  # their decimals


def _line(name: str, row: dict[str, Any]) -> str:
    """One row of the table; a row of texts is its header."""
    cells = (f"{row[k]:>8}" if isinstance(row[k], str) else f"{row[k]:>8.{decimals}f}" for k, decimals in _COLUMNS.items())
    return f"{name:<12} " + " ".join(cells)


_HEADER = _line("", {**{k: k for k in _COLUMNS}, "p50": "p50 ms", "p99": "p99 ms"})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.paired", description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", type=variant, metavar="NAME=TREE")
    ap.add_argument("--scenario", default="json", choices=[s for s, sc in SCENARIOS.items() if not sc.paced])
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=6.0, help="seconds of load per gateway and round (default 6)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--loadgen", default="auto", choices=["auto", "wrk", "builtin"],
                    help="auto: wrk when on PATH (apt-get install -y wrk), else the built-in loader")
    args = ap.parse_args(argv)
    if len({name for name, _ in args.variants}) != len(args.variants):
        print("each NAME=TREE needs a name of its own", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="specway-paired-"))
    try:
        rows = run(args.variants, args.scenario, args.conns, args.seconds, args.rounds, args.warmup,
                   args.loadgen if args.loadgen != "auto" else "wrk" if have_wrk() else "builtin", workdir)
        print(f"medians of {args.rounds} rounds\n{_HEADER}")
        for name, runs in rows.items():
            print(_line(name, {k: statistics.median(r[k] for r in runs) for k in runs[0]}))
        return 0
    except StartError as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        stop_all()
        drop_databases()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
