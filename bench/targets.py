"""What the benchmark sends load to: the fake upstream (direct), the two ceiling relays, Specway (one gateway per
store it is configured with), an older revision of it (--baseline) and LiteLLM when installed."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench.procs import (
    Proc,
    StartError,
    free_port,
    http_get,
    http_ok,
    http_post,
    loopback_env,
    port_is_free,
    port_is_open,
    wait_until,
)

REPO = Path(__file__).resolve().parent.parent
PEER_DIR = Path("/work/shared/peers/litellm")
LITELLM_VENV = Path("/tmp/litellm-venv")
LITELLM_KEY = "sk-bench-1234"
PEER_UPSTREAM_PORT = 18000  # what the peer's config.yaml names
CHAT_PATH = "/v1/chat/completions"
FREE_MODEL, PRICED_MODEL, PACED_MODEL = "bench/model", "bench/priced", "bench/paced"
PRICE = {"input": "0.15", "output": "0.60"}  # per million tokens, like a small hosted model
CREDIT = "1000000"  # so generous that no request of the run is ever refused for credit
PG_ADMIN_URL = os.environ.get("SPECWAY_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
CEILINGS = ("httpx", "aiohttp")  # bench/ceiling_<name>.py


@dataclass
class Target:
    name: str  # direct | specway | specway-pg | baseline | litellm | httpx-ceiling | aiohttp-ceiling
    base: str  # http://127.0.0.1:PORT
    model: str
    proc: Proc
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.base + CHAT_PATH


def start_upstream(workdir: Path, port: int | None, options: tuple[str, ...] = ()) -> Target:
    """The fake upstream on `port`, or on 18000 (the peer config's port) when free, else on any free port;
    `options` are more of its command-line options (a slow-stream mode)."""
    if port is None:
        port = PEER_UPSTREAM_PORT if port_is_free(PEER_UPSTREAM_PORT) else free_port()
    cmd = [sys.executable, "-m", "bench.upstream", "--port", str(port), *options]
    proc = Proc("upstream", cmd, workdir, cwd=REPO, env=loopback_env())
    base = f"http://127.0.0.1:{port}"
    wait_until(proc, lambda: http_ok(base + "/health"), 20, "answering /health")
    return Target("direct", base, "bench-model", proc)


def specway_command() -> list[str]:
    exe = Path(sys.executable).with_name("specway")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "handlers.cli.main"]


def checkout(rev: str, workdir: Path) -> Path:
    """The tree of a git revision of this repo, unpacked into workdir (for an A/B against an older gateway)."""
    dest = workdir / f"rev-{rev.replace('/', '_')}"
    dest.mkdir()
    archive = subprocess.run(["git", "archive", rev], cwd=REPO, capture_output=True, check=False)
    if archive.returncode != 0:
        raise StartError(f"git archive {rev}: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def specway_config(port: int, upstream_base: str, store_url: str, log_level: str) -> dict[str, object]:
    """One worker, one openai upstream (the fake), a free model, the same model with a price, and a free model whose
    streams the fake paces."""
    return {
        "server": {"host": "127.0.0.1", "port": port, "workers": 1, "log_level": log_level},
        "store": {"url": store_url},
        "upstreams": {"fake": {"kind": "openai", "base_url": upstream_base + "/v1"}},
        "models": [{"id": FREE_MODEL, "upstream": "fake", "name": "bench-model"},
                   {"id": PRICED_MODEL, "upstream": "fake", "name": "bench-model", "price": dict(PRICE)},
                   {"id": PACED_MODEL, "upstream": "fake", "name": "bench-paced"}],
    }


def _merged(base: dict[str, object], more: dict[str, object]) -> dict[str, object]:
    out = dict(base)
    for key, value in more.items():
        inner = out.get(key)
        out[key] = _merged(inner, value) if isinstance(inner, dict) and isinstance(value, dict) else value
    return out


def start_specway(workdir: Path, upstream: Target, log_level: str, name: str = "specway",
                  tree: Path = REPO, store_url: str | None = None,
                  settings: dict[str, object] | None = None) -> Target:
    """`specway serve`, one worker, on `store_url` (default: a fresh SQLite store in its work dir), with a free and a
    priced model on the fake upstream; the first workspace is credited generously. `tree` is the source tree it runs
    from (this one, or an older revision's for --baseline); `settings` are merged into its config (more workers,
    limits)."""
    workdir = workdir / name
    workdir.mkdir(exist_ok=True)
    port = free_port()
    store_url = store_url or f"sqlite:///{workdir / 'specway.db'}"  # absolute path: sqlite:////tmp/...
    cfg_path = workdir / "specway.yaml"
    config = _merged(specway_config(port, upstream.base, store_url, log_level), settings or {})
    cfg_path.write_text(json.dumps(config, indent=2) + "\n")
    # Run from `tree` with this venv's interpreter: `-m` puts the tree first on sys.path.
    command = specway_command() if tree == REPO else [sys.executable, "-m", "handlers.cli"]
    cmd = [*command, "--config", str(cfg_path), "serve", "--port", str(port), "--host", "127.0.0.1"]
    proc = Proc(name, cmd, workdir, cwd=tree, env=loopback_env())
    key: list[str] = []

    def key_printed() -> bool:
        lines = [ln.strip() for ln in proc.stdout_lines() if ln.strip()]
        if lines and re.fullmatch(r"\S{16,}", lines[0]):
            key.append(lines[0])
            return True
        return False

    wait_until(proc, key_printed, 60, "printing the first relay key on stdout")
    target = Target(name, f"http://127.0.0.1:{port}", FREE_MODEL, proc, {"Authorization": f"Bearer {key[0]}"})
    wait_until(proc, lambda: http_ok(target.base + "/v1/models", target.headers), 60, "answering GET /v1/models")
    credit_first_workspace(target)
    return target


def credit_first_workspace(target: Target) -> None:
    """Credit the first key's workspace (the first key has the admin scope) through the admin API."""
    status, body = http_get(target.base + "/v1/workspaces", target.headers)
    try:
        workspace = json.loads(body)["data"][0]["id"] if status == 200 else None
    except (ValueError, KeyError, IndexError, TypeError):
        workspace = None
    if workspace is None:
        raise StartError(f"{target.name}: GET /v1/workspaces answered {status}: {body[:300]!r}")
    status, body = http_post(f"{target.base}/v1/workspaces/{workspace}/credit",
                             json.dumps({"amount": CREDIT}).encode(), target.headers)
    if status != 200:
        raise StartError(f"{target.name}: crediting {workspace} answered {status}: {body[:300]!r}")


def start_ceiling(workdir: Path, upstream: Target, which: str) -> Target:
    """bench/ceiling_<which>.py under uvicorn (uvloop, httptools, 1 worker, no access log), as the gateway runs."""
    port = free_port()
    name = f"{which}-ceiling"
    cmd = [sys.executable, "-m", "uvicorn", f"bench.ceiling_{which}:app", "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1", "--loop", "uvloop", "--http", "httptools", "--log-level", "warning", "--no-access-log"]
    proc = Proc(name, cmd, workdir, cwd=REPO, env=loopback_env({"BENCH_UPSTREAM": upstream.base}))
    target = Target(name, f"http://127.0.0.1:{port}", "bench-model", proc)
    wait_until(proc, lambda: port_is_open(port), 30, f"listening on port {port}")
    return target


# --- a fresh PostgreSQL database per run ------------------------------------------------------------------------

_DATABASES: list[tuple[str, str]] = []  # (admin url, database) created by this run, dropped by drop_databases()


def _with_admin(admin_url: str, sql: str) -> None:
    import asyncpg  # only when a PostgreSQL scenario runs

    async def run() -> None:
        conn = await asyncpg.connect(admin_url, timeout=10)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run())


def create_database(admin_url: str = PG_ADMIN_URL) -> str:
    """A fresh database next to `admin_url`'s (dropped by drop_databases()); its postgresql:// URL."""
    name = f"specway_bench_{os.getpid()}_{os.urandom(3).hex()}"
    try:
        _with_admin(admin_url, f'CREATE DATABASE "{name}"')
    except Exception as exc:  # any driver or connection error: no PostgreSQL to bench on
        raise StartError(f"cannot create a PostgreSQL database via {admin_url} ({exc}); "
                         "set SPECWAY_BENCH_PG_URL or leave out the priced-postgres scenario") from exc
    _DATABASES.append((admin_url, name))
    return admin_url.rsplit("/", 1)[0] + "/" + name


def drop_databases() -> None:
    """Drop every database this run created (after the gateways using them have stopped)."""
    while _DATABASES:
        admin_url, name = _DATABASES.pop()
        try:
            _with_admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except Exception as exc:  # noqa: BLE001 - report and go on: the numbers stand
            print(f"bench: could not drop database {name}: {exc}", file=sys.stderr)


def find_litellm(given: str | None) -> Path | None:
    """The litellm executable: --litellm (an executable or a venv), else PATH, else /tmp/litellm-venv."""
    if given:
        p = Path(given)
        for cand in (p, p / "bin" / "litellm"):
            if cand.is_file():
                return cand
        raise StartError(f"--litellm {given}: no litellm executable there (nor in {p / 'bin'})")
    found = shutil.which("litellm")
    if found:
        return Path(found)
    venv = LITELLM_VENV / "bin" / "litellm"
    return venv if venv.is_file() else None


def peer_env(env_sh: Path) -> tuple[dict[str, str], tuple[str, ...]]:
    """The exports and unsets of the peer's env.sh (the `source env.sh` equivalent), read not executed."""
    exports: dict[str, str] = {}
    unset: list[str] = []
    for line in env_sh.read_text().splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] == "export":
            exports.update(w.split("=", 1) for w in words[1:] if "=" in w)
        elif words and words[0] == "unset":
            unset.extend(words[1:])
    return exports, tuple(unset)


def start_litellm(workdir: Path, exe: Path, upstream: Target, peer_dir: Path, timeout: float) -> Target:
    """The LiteLLM proxy, one worker, with the peer's config pointed at our fake upstream's port."""
    config = (peer_dir / "config.yaml").read_text()
    config = config.replace(f"127.0.0.1:{PEER_UPSTREAM_PORT}", upstream.base.removeprefix("http://"))
    cfg_path = workdir / "litellm.yaml"
    cfg_path.write_text(config)
    exports, unset = peer_env(peer_dir / "env.sh")
    port = free_port()
    cmd = [str(exe), "--config", str(cfg_path), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
    env = loopback_env({**exports, "PATH": f"{exe.parent}:{loopback_env().get('PATH', '')}"}, unset)
    proc = Proc("litellm", cmd, workdir, cwd=workdir, env=env)
    target = Target("litellm", f"http://127.0.0.1:{port}", "bench-model", proc,
                    {"Authorization": f"Bearer {LITELLM_KEY}"})
    wait_until(proc, lambda: http_ok(target.base + "/health/liveliness"), timeout, "answering /health/liveliness")
    return target
