"""A flame graph of the gateway under load: `python -m bench.profile --scenario json -o bench/profiles/json.svg`.

Starts the fake upstream and one gateway (as `python -m bench` does), loads it with wrk for the warm-up, then runs
py-spy on the gateway's process tree while wrk keeps the load on for `--seconds` (`--revision REV`: the gateway of an older revision, for a before). py-spy is not a dependency of
the project: install it into the venv (`pip install py-spy`); it needs ptrace rights over the gateway (root, or
kernel.yama.ptrace_scope 0)."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.load import SCENARIOS, run_cell
from bench.procs import stop_all
from bench.targets import REPO, checkout, start_specway, start_upstream


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="json", choices=[s for s, sc in SCENARIOS.items() if sc.store == "sqlite"])
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds sampled (default 20)")
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--rate", type=int, default=250, help="py-spy samples per second (default 250)")
    ap.add_argument("--format", default="flamegraph", choices=["flamegraph", "speedscope", "raw"])
    ap.add_argument("--revision", metavar="REV", help="profile the gateway of this git revision (a before)")
    ap.add_argument("-o", "--output", required=True, type=Path)
    args = ap.parse_args(argv)
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if py_spy is None:
        print("py-spy is not installed: pip install py-spy", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="specway-profile-"))
    try:
        upstream = start_upstream(workdir, None)
        tree = checkout(args.revision, workdir) if args.revision else REPO
        gateway = start_specway(workdir, upstream, "warning", tree=tree)
        run_cell(gateway, args.scenario, args.conns, args.warmup, "wrk", workdir)
        spy = subprocess.Popen([py_spy, "record", "--subprocesses", "--nonblocking", "--rate", str(args.rate),
                                "--duration", f"{args.seconds:g}", "--format", args.format, "-o", str(args.output),
                                "--pid", str(gateway.proc.pid)])
        result = run_cell(gateway, args.scenario, args.conns, args.seconds + 2, "wrk", workdir)
        spy.wait(timeout=args.seconds + 60)
        _scrub(args.output, {str(workdir): "WORKDIR", str(REPO): "."})
        print(f"{args.scenario} c{args.conns}: {result.rps:.0f} req/s while sampled, {result.errors} errors; "
              f"{args.output}")
        return spy.returncode
    finally:
        stop_all()
        shutil.rmtree(workdir, ignore_errors=True)


def _scrub(path: Path, names: dict[str, str]) -> None:
    """The gateway's command line (in the graph's title) without this machine's directories."""
    if path.exists():
        text = path.read_text(errors="replace")
        for long, short in names.items():
            text = text.replace(long, short)
        path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
