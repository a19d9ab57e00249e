"""Shared fixtures: a real gateway on a real port (uvicorn in a thread), with a real SQLite store and keys."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from handlers import config as config_mod
from handlers.app import create_app
from handlers.gateway import Gateway
from handlers.store.base import SCOPES


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
def serve(config: dict[str, Any] | None, tmp_path: Path) -> Iterator[Live]:
    data = dict(config or {})
    data.setdefault("store", {"url": f"sqlite:///{tmp_path / 'specway.db'}"})
    cfg = config_mod.parse(data, "test config")
    gw = Gateway(cfg)
    app = create_app(gateway=gw)
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
    live = Live(url=f"http://127.0.0.1:{port}", key="", gateway=gw, loop=loop)
    live.workspace_id = live.new_workspace("default")
    live.key = live.create_key()
    try:
        yield live
    finally:
        server.should_exit = True
        thread.join(15)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    """The gateway on its embedded defaults (the echo upstream)."""
    with serve(None, tmp_path) as g:
        yield g
