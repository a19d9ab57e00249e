"""A real package (issue 12): the wheel carries the spec it serves and the console's files. Built from the project, installed into a fresh
venv outside the repository, it starts and answers a chat request."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str | Path, cwd: Path) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_the_wheel_installs_alone_and_serves_its_spec(tmp_path: Path) -> None:
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "dist", ROOT, cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("specway-*.whl"))
    _run(sys.executable, "-m", "venv", tmp_path / "venv", cwd=tmp_path)
    _run(tmp_path / "venv/bin/pip", "install", "-q", wheel, cwd=tmp_path)
    specway = tmp_path / "venv/bin/specway"
    assert _run(specway, "--version", cwd=tmp_path).startswith("specway ")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECWAY_")} | {"SPECWAY_SERVER__PORT": str(port)}
    proc = subprocess.Popen([specway, "serve"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        for _ in range(300):
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                assert proc.poll() is None, "the installed specway exited"
                time.sleep(0.1)
        assert proc.stdout is not None
        key = proc.stdout.readline().strip()
        spec = httpx.get(f"http://127.0.0.1:{port}/openapi.json")
        assert spec.content == (ROOT / "openapi.json").read_bytes()
        assets = ROOT / "handlers" / "console" / "assets"
        for name in sorted(p.name for p in assets.iterdir()):  # the console ships whole, its built bundle included
            served = httpx.get(f"http://127.0.0.1:{port}/console/assets/{name}")
            assert served.status_code == 200 and served.content == (assets / name).read_bytes(), name
        assert httpx.get(f"http://127.0.0.1:{port}/console/keys").content == (assets / "index.html").read_bytes()
        answer = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                            json={"messages": [{"role": "user", "content": "hello"}]})
        assert answer.status_code == 200 and answer.json()["object"] == "chat.completion"
    finally:
        proc.terminate()
        proc.wait(30)
