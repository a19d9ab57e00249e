"""The three things the benchmark sends load to: the fake upstream (direct), Specway, and LiteLLM when installed."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench.procs import Proc, StartError, free_port, http_ok, loopback_env, port_is_free, wait_until

REPO = Path(__file__).resolve().parent.parent
PEER_DIR = Path("/work/shared/peers/litellm")
LITELLM_VENV = Path("/tmp/litellm-venv")
LITELLM_KEY = "sk-bench-1234"
PEER_UPSTREAM_PORT = 18000  # what the peer's config.yaml names
CHAT_PATH = "/v1/chat/completions"


@dataclass
class Target:
    name: str  # direct | specway | litellm | baseline
    base: str  # http://127.0.0.1:PORT
    model: str
    proc: Proc
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.base + CHAT_PATH


def start_upstream(workdir: Path, port: int | None) -> Target:
    """The fake upstream on `port`, or on 18000 (the peer config's port) when free, else on any free port."""
    if port is None:
        port = PEER_UPSTREAM_PORT if port_is_free(PEER_UPSTREAM_PORT) else free_port()
    cmd = [sys.executable, "-m", "bench.upstream", "--port", str(port)]
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


def start_specway(workdir: Path, upstream: Target, log_level: str, name: str = "specway",
                  tree: Path = REPO) -> Target:
    """`specway serve` on a fresh SQLite store, one worker, one openai upstream (the fake) with model bench/model.
    `tree` is the source tree it runs from (this one, or an older revision's for --baseline)."""
    workdir = workdir / name
    workdir.mkdir(exist_ok=True)
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port, "workers": 1, "log_level": log_level},
        "store": {"url": f"sqlite:///{workdir / 'specway.db'}"},  # absolute path: sqlite:////tmp/...
        "upstreams": {"fake": {"kind": "openai", "base_url": upstream.base + "/v1"}},
        "models": [{"id": "bench/model", "upstream": "fake", "name": "bench-model"}],
    }
    cfg_path = workdir / "specway.yaml"
    cfg_path.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML
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
    target = Target(name, f"http://127.0.0.1:{port}", "bench/model", proc, {"Authorization": f"Bearer {key[0]}"})
    wait_until(proc, lambda: http_ok(target.base + "/v1/models", target.headers), 60, "answering GET /v1/models")
    return target


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
