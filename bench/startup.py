"""python -m bench.startup: how long `specway` takes to start. Each read-only command from exec to exit, and `specway
serve` from exec to its first 200 on /healthz (embedded defaults, and a configuration naming three upstreams and a
model on each), as the median of --runs runs: wall time, and the CPU time the process used (steadier than wall time
on a shared machine). With --baseline REV the same for a git revision, interleaved run by run.

Every run is a fresh process on a warm install: one unmeasured run of each command first writes the bytecode and
fills the page cache. A revision runs from its `git archive` with this interpreter, as `python -m bench` does.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.procs import CLK_TCK, free_port, http_ok, loopback_env
from bench.targets import REPO, checkout

THREE_UPSTREAMS = """\
upstreams:
  openai: {kind: openai, base_url: "http://127.0.0.1:9/v1", api_key_env: BENCH_KEY}
  anthropic: {kind: anthropic, base_url: "http://127.0.0.1:9", api_key_env: BENCH_KEY}
  gemini: {kind: gemini, base_url: "http://127.0.0.1:9", api_key_env: BENCH_KEY}
models:
  - {id: fast, upstream: openai, name: gpt-4o-mini}
  - {id: strong, upstream: anthropic, name: claude-sonnet-4-5-20250929}
  - {id: flash, upstream: gemini, name: gemini-2.5-flash}
policies:
  default: {default_model: fast}
"""
# The read-only commands, then serve; KEY is the id of the first key.
COMMANDS = [["--help"], ["keys", "list"], ["keys", "list", "--json"], ["keys", "show", "KEY"], ["workspaces", "list"],
            ["usage"], ["audit"], ["-c", "three.yaml", "keys", "list"], ["models", "lookup", "gpt-4o-mini"]]
SERVES = [[], ["-c", "three.yaml"]]
Sample = tuple[float, float]  # wall seconds, CPU seconds


class Tree:
    """One tree of the code (this checkout, or a revision's) and the store and config its runs use."""

    def __init__(self, name: str, source: Path, workdir: Path) -> None:
        self.name, self.dir = name, workdir / f"run-{name}"
        self.dir.mkdir()
        (self.dir / "three.yaml").write_text(THREE_UPSTREAMS)
        # The tree first on the path; no PYTHONDONTWRITEBYTECODE: an install has its bytecode.
        self.env = loopback_env({"PYTHONPATH": str(source), "BENCH_KEY": "unused",
                                 "SPECWAY_STORE__URL": f"sqlite:///{self.dir / 'specway.db'}"},
                                unset=("PYTHONDONTWRITEBYTECODE", "SPECWAY_CONFIG"))
        self.key = ""

    def argv(self, args: list[str]) -> list[str]:
        return [sys.executable, "-m", "handlers.cli.main", *[self.key if a == "KEY" else a for a in args]]

    def command(self, args: list[str]) -> Sample:
        started = time.perf_counter()
        proc = subprocess.Popen(self.argv(args), cwd=self.dir, env=self.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        err = proc.stderr.read() if proc.stderr else b""
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode not in (0, 1):  # 1: models lookup of a name the data does not know
            raise SystemExit(f"{self.name}: specway {' '.join(args)} failed: {err.decode(errors='replace')[-800:]}")
        return time.perf_counter() - started, usage.ru_utime + usage.ru_stime

    def serve(self, args: list[str]) -> Sample:
        port = free_port()
        started = time.perf_counter()
        with open(self.dir / "serve.log", "wb") as log:
            proc = subprocess.Popen(self.argv([*args, "serve", "--port", str(port)]), cwd=self.dir, env=self.env,
                                    stdout=subprocess.DEVNULL, stderr=log)
        try:
            while not http_ok(f"http://127.0.0.1:{port}/healthz", timeout=1.0):
                if proc.poll() is not None:
                    raise SystemExit(f"{self.name}: serve exited: {(self.dir / 'serve.log').read_text()[-800:]}")
                time.sleep(0.002)
            wall = time.perf_counter() - started
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return wall, (int(fields[11]) + int(fields[12])) / CLK_TCK
        finally:
            proc.terminate()
            proc.wait()

    def first_key(self) -> None:
        self.serve([])  # a fresh store: migrations, the first key
        with sqlite3.connect(self.dir / "specway.db") as db:
            self.key = db.execute("SELECT id FROM keys LIMIT 1").fetchone()[0]


def measure(trees: list[Tree], runs: int) -> dict[str, dict[str, list[Sample]]]:
    cases: list[tuple[str, Callable[[Tree, list[str]], Sample], list[str]]] = [
        ("specway " + " ".join(a), Tree.command, a) for a in COMMANDS]
    cases += [("specway " + " ".join([*a, "serve"]), Tree.serve, a) for a in SERVES]
    found: dict[str, dict[str, list[Sample]]] = {}
    for name, run, args in cases:
        for tree in trees:
            run(tree, args)  # unmeasured: bytecode, page cache
        found[name] = {tree.name: [] for tree in trees}
        for _ in range(runs):
            for tree in trees:  # interleaved, so both see the same load
                found[name][tree.name].append(run(tree, args))
    return found


def table(found: dict[str, dict[str, list[Sample]]], names: list[str], runs: int) -> str:
    head = f"{'command':42s}" + "".join(f"{n + ' wall ms':>18s}{n + ' CPU ms':>17s}" for n in names)
    lines = [head]
    for case, by_tree in found.items():
        cells = "".join(f"{statistics.median(s[0] for s in by_tree[n]) * 1000:18.0f}"
                        f"{statistics.median(s[1] for s in by_tree[n]) * 1000:17.0f}" for n in names)
        lines.append(f"{case:42s}{cells}")
    lines.append(f"median of {runs} runs; serve: exec -> first 200 on /healthz; load average "
                 f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=11, help="measured runs of each command (default 11)")
    parser.add_argument("--baseline", metavar="REV", help="also measure this git revision, interleaved")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="specway-startup-") as tmp:
        work = Path(tmp)
        trees = [Tree("this", REPO, work)]
        if args.baseline:
            trees.append(Tree("baseline", checkout(args.baseline, work), work))
        for tree in trees:
            tree.first_key()
        found = measure(trees, args.runs)
    print(table(found, [t.name for t in trees], args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
