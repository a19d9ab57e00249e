"""Shared fixtures: a real gateway on a real port (uvicorn in a thread), with a real SQLite store and keys."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest
import uvicorn

from handlers import config as config_mod
from handlers.edge.app import create_app
from handlers.gateway import Gateway
from handlers.store.base import SCOPES
from tests.error_codes_support import AuditErrors


def in_ci() -> bool:
    """Whether this run is CI: the CI variable set to true, 1 or yes (any case), as .ci/run and CI services set it."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def unavailable(message: str) -> NoReturn:
    """A service or tool a test needs is missing: skip on a developer's machine, fail in CI (where .ci/run provides
    every one of them), so that a green CI run never hides a skipped test."""
    if in_ci():
        pytest.fail(f"{message} (CI is set, and .ci/run must provide it)")
    pytest.skip(message)


def tool(name: str) -> str:
    """The path of a command-line tool, or unavailable()."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/lib/postgresql/bin")
    if found:
        return found
    unavailable(f"`{name}` is not installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Live:
    """A running gateway: its base URL, a key with every scope, and a way to run coroutines on its loop."""

    url: str
    key: str
    gateway: Gateway
    loop: asyncio.AbstractEventLoop
    audit: AuditErrors
    workspace_id: str = ""
    keys: dict[str, str] = field(default_factory=dict)

    def run(self, coro: Any, timeout: float = 10) -> Any:
        fut: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout)

    def create_key(self, scopes: tuple[str, ...] = SCOPES, workspace_id: str | None = None, **kw: Any) -> str:
        _, secret = self.run(self.gateway.store.create_key(workspace_id or self.workspace_id, "test", scopes, **kw))
        return str(secret)

    def new_workspace(self, name: str = "other") -> str:
        return str(self.run(self.gateway.store.create_workspace(name)).id)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@contextmanager
def serve(config: dict[str, Any] | None, tmp_path: Path, *, path: Path | None = None) -> Iterator[Live]:
    """The gateway of `config`, or of the file at `path` (which a reload then reads again)."""
    if path is not None:
        gw = Gateway.from_file(str(path))
    else:
        data = dict(config or {})
        data.setdefault("store", {"url": f"sqlite:///{tmp_path / 'specway.db'}"})
        gw = Gateway(config_mod.parse(data, "test config"))
    app = AuditErrors(create_app(gateway=gw))  # every error answer's code is checked against the spec
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on",
                                           loop="asyncio", http="httptools"))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.serve(),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the gateway did not start")
        time.sleep(0.02)
    live = Live(url=f"http://127.0.0.1:{port}", key="", gateway=gw, loop=loop, audit=app)
    live.workspace_id = live.new_workspace("default")
    live.key = live.create_key()
    try:
        yield live
    finally:
        server.should_exit = True
        thread.join(15)
    assert not app.problems, "error codes the spec does not declare for the operation:\n" + "\n".join(app.problems)


def spawn(config: Path, port: int, log: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """`specway serve` as its own process; returns it and the first key it printed (empty on a used store)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "handlers.cli", "--config", str(config), "serve", "--port", str(port), *extra],
        stdout=subprocess.PIPE, stderr=log.open("w"), text=True,
    )
    assert proc.stdout is not None
    key: list[str] = []
    reader = threading.Thread(target=lambda: key.append(proc.stdout.readline().strip()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    deadline = time.monotonic() + 90  # several workers importing on a busy 2-core machine
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=1).raise_for_status()
            break
        except httpx.HTTPError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(f"specway serve did not start:\n{log.read_text()}") from None
            time.sleep(0.1)
    reader.join(0.5)
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # never let a full pipe stall the server
    return proc, key[0] if key else ""


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    """The gateway on its embedded defaults (the echo upstream)."""
    with serve(None, tmp_path) as g:
        yield g


PG_ADMIN_URL = os.environ.get("SPECWAY_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@contextmanager
def fresh_postgres() -> Iterator[str]:
    """A new, empty PostgreSQL database for one test, dropped afterwards. Unreachable: unavailable()."""
    import asyncpg

    name = f"specway_test_{uuid.uuid4().hex[:12]}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(PG_ADMIN_URL, timeout=5)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    try:
        asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    except (OSError, asyncpg.PostgresError) as exc:
        unavailable(f"PostgreSQL is not reachable at {PG_ADMIN_URL}: {exc}")
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def proc_kib(pid: int, field: str) -> int:
    """A process's memory figure from /proc/<pid>/status, in KiB: VmRSS (now) or VmHWM (its peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")
